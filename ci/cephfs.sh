#!/usr/bin/env bash
# A real single-host CephFS for ckptio's striping tests (issue 26): Debian 12's Ceph 16.2 (Pacific), no containers,
# no systemd, no kernel client. 1 mon, 1 mgr, 3 BlueStore OSDs on sparse files, 1 MDS, one CephFS mounted with
# ceph-fuse. Idempotent:
#
#   ci/cephfs.sh up       install the packages if missing, create the cluster if it does not exist (cold), start
#                         whatever daemon is not running (warm), wait for HEALTH_OK, mount; prints the mount point.
#                         Other ceph-fuse clients of the same file system (one per emulated node, tests/cephfs)
#                         can mount it with: ceph-fuse -c $CEPH_CONF -n client.admin -k $KEYRING --client_fs cephfs DIR
#   ci/cephfs.sh status   health, daemons, mount; exit 0 only when up, healthy and mounted
#   ci/cephfs.sh down     unmount and stop the daemons (the cluster's data stays: the next `up` is warm)
#   ci/cephfs.sh purge    down, then remove the cluster's data (the next `up` is cold)
#   ci/cephfs.sh env      shell assignments: CKPTIO_CEPHFS (mount point), CEPH_CONF, CKPTIO_CEPH_DATA_POOL
#
# Where (environment): CKPTIO_CEPH_DIR (state: config, keys, daemon data, OSD block files, logs; default
# /var/lib/ckptio-ceph), CKPTIO_CEPHFS (mount point; default /mnt/ckptio-cephfs), CKPTIO_CEPH_OSD_GB (size of each
# sparse OSD block file, default 10). Ports: the monitor listens on 127.0.0.1:3300 (msgr2 only), every other
# daemon on 127.0.0.1 in 6800-7300 (Ceph's default range). Needs root and /dev/fuse.
#
# Health: HEALTH_OK is reached on one host because (a) CRUSH places replicas over OSDs, not hosts
# (osd_crush_chooseleaf_type=0), (b) pools keep one copy (size 1: a test cluster, three OSDs on one disk; the
# POOL_NO_REDUNDANCY warning is switched off) and (c) the file system wants no standby MDS.
# Memory: OSD caches are fixed and small (bluestore_cache_autotune off, 64 MiB cache; osd_memory_target at its
# minimum), the mgr runs only its always-on modules.
set -euo pipefail

D=${CKPTIO_CEPH_DIR:-/var/lib/ckptio-ceph}
MNT=${CKPTIO_CEPHFS:-/mnt/ckptio-cephfs}
OSD_GB=${CKPTIO_CEPH_OSD_GB:-10}
CONF=$D/ceph.conf
NOSD=3
FS=cephfs
DATA_POOL=cephfs_data
META_POOL=cephfs_metadata
export CEPH_CONF=$CONF

log() { echo "ci/cephfs.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
ceph_() { timeout 60 ceph -c "$CONF" -n client.admin -k "$D/admin.keyring" "$@"; }

install_packages() {
  local missing=()
  for cmd in ceph ceph-mon ceph-osd ceph-mgr ceph-mds ceph-fuse rados getfattr uuidgen; do
    command -v "$cmd" >/dev/null || missing+=("$cmd")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Ceph (missing: ${missing[*]})"
  local t=$SECONDS
  DEBIAN_FRONTEND=noninteractive flock -w 1800 /run/lock/ckptio-apt apt-get -o DPkg::Lock::Timeout=1800 install -y -q --no-install-recommends \
    ceph ceph-mon ceph-osd ceph-mgr ceph-mds ceph-fuse ceph-common attr uuid-runtime >/dev/null \
    || { flock -w 1800 /run/lock/ckptio-apt apt-get -o DPkg::Lock::Timeout=1800 update -q >/dev/null &&
         DEBIAN_FRONTEND=noninteractive flock -w 1800 /run/lock/ckptio-apt apt-get -o DPkg::Lock::Timeout=1800 install -y -q --no-install-recommends \
           ceph ceph-mon ceph-osd ceph-mgr ceph-mds ceph-fuse ceph-common attr uuid-runtime >/dev/null; }
  log "packages installed in $((SECONDS - t)) s"
}

write_conf() {
  local fsid=$1
  cat >"$CONF" <<EOF
[global]
fsid = $fsid
mon_host = [v2:127.0.0.1:3300]
public_network = 127.0.0.0/8
ms_bind_msgr1 = false
ms_bind_port_min = 6800
ms_bind_port_max = 7300
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
osd_crush_chooseleaf_type = 0
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_allow_pool_delete = true
mon_data_avail_warn = 5
mon_data_avail_crit = 2
run_dir = $D/run
pid_file = $D/run/\$name.pid
admin_socket = $D/run/\$cluster-\$name.asok
log_file = $D/log/\$cluster-\$name.log
crash_dir = $D/crash
keyring = $D/\$name.keyring

[mon]
mon_data = $D/mon/\$cluster-\$id
keyring = $D/mon..keyring

[mgr]
mgr_data = $D/mgr/\$cluster-\$id

[osd]
osd_data = $D/osd/\$cluster-\$id
osd_objectstore = bluestore
bluestore_block_create = true
bluestore_block_size = $((OSD_GB << 30))
bluestore_cache_autotune = false
bluestore_cache_size = 67108864
osd_memory_target = 939524096
osd_memory_target_autotune = false

[mds]
mds_data = $D/mds/\$cluster-\$id
mds_cache_memory_limit = 134217728
# A warm start after the host lost its processes (a killed job, a machine reused by CI) finds the previous
# ceph-fuse client's session in the MDS journal; the MDS waits this long for it to reconnect (default 45 s).
mds_reconnect_timeout = 5

[client]
client_mount_timeout = 30
admin_socket =
pid_file =
EOF
}

running() {  # running NAME (mon.a, osd.0, ...): its pid file names a live process that is that daemon
  local pidf=$D/run/$1.pid pid                      # (a pid file left by a lost process can name a reused pid)
  [ -s "$pidf" ] || return 1
  pid=$(cat "$pidf")
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "^ceph-${1%%.*} .*-i ${1#*.} *\$"
}

start() {  # start DAEMON ID
  running "${1#ceph-}.$2" && return 0
  "$1" -c "$CONF" -i "$2" 2>>"$D/log/start-${1#ceph-}.$2.err" >&2
}

mounted() { grep -qs " $MNT fuse.ceph-fuse " /proc/mounts; }

create_cluster() {
  local fsid
  fsid=$(uuidgen)
  log "creating the cluster in $D (fsid $fsid)"
  mkdir -p "$D"/{run,log,crash,mon,mgr,osd,mds}
  write_conf "$fsid"
  ceph-authtool --create-keyring "$D/mon..keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool --create-keyring "$D/admin.keyring" --gen-key -n client.admin --cap mon 'allow *' \
    --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
  cp "$D/admin.keyring" "$D/client.admin.keyring"
  ceph-authtool "$D/mon..keyring" --import-keyring "$D/admin.keyring" >/dev/null
  monmaptool --create --addv a '[v2:127.0.0.1:3300]' --fsid "$fsid" "$D/monmap" >/dev/null
  ceph-mon -c "$CONF" --mkfs -i a --monmap "$D/monmap" --keyring "$D/mon..keyring" 2>"$D/log/mkfs-mon.err" \
    || { cat "$D/log/mkfs-mon.err" >&2; die "mkfs of mon.a failed"; }
  start ceph-mon a
  ceph_ status >/dev/null
  mkdir -p "$D/mgr/ceph-x"
  ceph_ auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' > "$D/mgr.x.keyring"
  start ceph-mgr x
  for i in $(seq 0 $((NOSD - 1))); do
    local uuid id
    uuid=$(uuidgen)
    id=$(ceph_ osd new "$uuid")
    [ "$id" = "$i" ] || die "ceph osd new gave id $id, expected $i"
    mkdir -p "$D/osd/ceph-$id"
    ceph-authtool --create-keyring "$D/osd.$id.keyring" --gen-key -n "osd.$id" >/dev/null
    ceph_ auth add "osd.$id" osd 'allow *' mon 'allow profile osd' mgr 'allow profile osd' -i "$D/osd.$id.keyring" \
      2>/dev/null
    ceph-osd -c "$CONF" -i "$id" --mkfs --osd-uuid "$uuid" 2>"$D/log/mkfs-osd.$id.err" \
      || { cat "$D/log/mkfs-osd.$id.err" >&2; die "mkfs of osd.$id failed"; }
    start ceph-osd "$id"
  done
  mkdir -p "$D/mds/ceph-a"
  ceph_ auth get-or-create mds.a mon 'allow profile mds' mgr 'allow profile mds' mds 'allow *' osd 'allow *' \
    > "$D/mds.a.keyring"
  start ceph-mds a
  ceph_ osd pool create "$META_POOL" 16 >/dev/null
  ceph_ osd pool create "$DATA_POOL" 32 >/dev/null
  ceph_ fs new "$FS" "$META_POOL" "$DATA_POOL" >/dev/null
  ceph_ fs set "$FS" standby_count_wanted 0
  touch "$D/created"
}

mds_active() {  # the MDS map names a rank-0 MDS that is up:active and answering (not "laggy or crashed": a
  # restarted monitor reports the MDS of before the restart as active until its beacon grace runs out)
  local stat
  stat=$(ceph_ mds stat 2>/dev/null) || return 1
  [[ $stat == *"=up:active}"* ]]
}

wait_healthy() {  # up to $1 seconds for HEALTH_OK with every OSD up and the MDS active
  local deadline=$((SECONDS + $1)) health=""
  while [ $SECONDS -lt $deadline ]; do
    health=$(ceph_ health 2>/dev/null || true)
    if [ "$health" = HEALTH_OK ] && mds_active; then
      return 0
    fi
    sleep 1
  done
  ceph_ health detail >&2 || true
  die "no HEALTH_OK after $1 s (last: ${health:-no answer})"
}

do_mount() {
  if mounted; then
    timeout 10 stat -t "$MNT/." >/dev/null 2>&1 && return 0
    log "$MNT is mounted but does not answer (its ceph-fuse client is gone): remounting"
    umount -l "$MNT" 2>/dev/null || fusermount -uz "$MNT" 2>/dev/null || true
  fi
  mkdir -p "$MNT"
  local try
  for try in 1 2 3 4 5; do  # (an MDS that just took over can refuse the first client: retry, as a site's automount)
    if ceph-fuse -c "$CONF" -n client.admin -k "$D/admin.keyring" --client_fs "$FS" "$MNT" >/dev/null \
         2>"$D/log/ceph-fuse.err"; then
      mounted || die "ceph-fuse returned but $MNT is not mounted"
      timeout 30 stat -t "$MNT/." >/dev/null 2>&1 || die "$MNT is mounted but does not answer"
      return 0
    fi
    log "ceph-fuse could not mount $MNT (try $try): $(tail -n1 "$D/log/ceph-fuse.err")"
    running mds.a || start ceph-mds a
    wait_healthy 120
  done
  cat "$D/log/ceph-fuse.err" >&2
  die "ceph-fuse could not mount $MNT"
}

cmd_up() {
  local t=$SECONDS
  [ "$(id -u)" = 0 ] || die "needs root (daemons, /dev/fuse, mount)"
  [ -c /dev/fuse ] || die "/dev/fuse is missing: FUSE is unavailable here"
  install_packages
  if [ ! -e "$D/created" ]; then
    rm -rf "$D"
    create_cluster
  else
    write_conf "$(awk '$1 == "fsid" {print $3}' "$CONF")"  # this version's settings, the cluster's identity
    start ceph-mon a
    start ceph-mgr x
    for i in $(seq 0 $((NOSD - 1))); do start ceph-osd "$i"; done
    start ceph-mds a
  fi
  wait_healthy 180
  do_mount
  log "up: HEALTH_OK, $FS mounted at $MNT ($((SECONDS - t)) s)"
  echo "$MNT"
}

cmd_down() {
  if mounted; then
    umount "$MNT" 2>/dev/null || umount -l "$MNT"
  fi
  local name pids=()
  for name in mds.a osd.0 osd.1 osd.2 mgr.x mon.a; do
    if running "$name"; then
      pids+=("$(cat "$D/run/$name.pid")")
      kill "${pids[-1]}"
    fi
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  done
  log "down"
}

cmd_status() {
  local ok=0 name
  for name in mon.a mgr.x osd.0 osd.1 osd.2 mds.a; do
    if running "$name"; then echo "$name running (pid $(cat "$D/run/$name.pid"))"; else echo "$name stopped"; ok=1; fi
  done
  if [ $ok = 0 ]; then
    ceph_ -s || ok=1
    [ "$(ceph_ health 2>/dev/null)" = HEALTH_OK ] || ok=1
  fi
  if mounted; then echo "mounted at $MNT"; else echo "not mounted ($MNT)"; ok=1; fi
  return $ok
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  purge) cmd_down; rm -rf "$D"; rmdir "$MNT" 2>/dev/null || true; log "purged $D" ;;
  env) echo "CKPTIO_CEPHFS=$MNT"; echo "CEPH_CONF=$CONF"; echo "CKPTIO_CEPH_DATA_POOL=$DATA_POOL"
       echo "CKPTIO_CEPH_KEYRING=$D/admin.keyring" ;;
  *) echo "usage: $0 up|down|status|purge|env" >&2; exit 2 ;;
esac
