"""``ckptio plan`` refuses bad numbers as usage errors (exit 2, naming the option) instead of a traceback or a
silently different scenario (outside trial: --ranks 0 and --stripe-size 0 divided by zero, --bytes 1P ran for
ever, --stripe-count 0 and --readers 0 were replaced by defaults)."""

import pytest

from ckptio.tools.cli import main


@pytest.mark.parametrize("args,option", [
    (["--ranks", "0"], "--ranks"), (["--ranks=-3"], "--ranks"), (["--stripe-size", "0"], "--stripe-size"),
    (["--bytes=-5G"], "--bytes"), (["--bytes", "lots"], "--bytes"), (["--stripe-count", "0"], "--stripe-count"),
    (["--readers", "0"], "--readers"), (["--variables", "0"], "--variables"), (["--aggregators", "0"], "--aggregators"),
    (["--bytes", "1P"], "--stripe-size"),
])
def test_bad_plan_arguments_are_usage_errors(args, option, capsys):
    base = {"--ranks": "4", "--bytes": "1G"}
    given = {a.split("=")[0] for a in args if a.startswith("--")}
    argv = ["plan", "--no-control-plane", *args, *[x for k, v in base.items() if k not in given for x in (k, v)]]
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(main(argv))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err, err
