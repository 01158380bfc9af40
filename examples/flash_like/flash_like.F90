!> flash_like.F90 -- the FLASH-like mini-app of flash_like.py, in Fortran, checkpointing through module ckptio.
!>
!> Same grid, variables, decomposition, deterministic update, attributes and checkpoint names as the Python
!> driver, so a checkpoint written by either one restarts the other (on any rank count), and both produce
!> bit-identical float64 data for the same steps. The arithmetic below follows the Python expressions operation
!> by operation (parenthesised the way Python evaluates them); compile without FMA contraction and fast-math
!> (gfortran: -O2 -fno-fast-math -ffp-contract=off; the CMake build does this).
!>
!> Layout: cell variables are fld(1-NGUARD:nxb+NGUARD, (same), (same), nlocal, 7) -- indices (x, y, z, block,
!> variable) -- with NGUARD guard cells on each side of every block, as in FLASH's unk array. The guard cells are
!> filled from the interior after every update (zero-gradient) and are never stored: the interiors
!> fld(1:nxb, 1:nxb, 1:nxb, :, v) are written in place -- without a copy -- with ckptio_write's memory selection
!> (interior_start=/interior_shape=, zero-copy mode) and read straight back into the interiors, stored with
!> Fortran-order global shape (nxb, nxb, nxb, nblocks), i.e. exactly the Python array (nblocks, nxb, nxb, nxb)
!> with axes (block, z, y, x). bbox(2, 3, nlocal) is Python's
!> (nblocks, 3, 2); tracers(4, n) is Python's (n, 4), the per-rank segment "tracers" (rows=.true.: rows along n).
!>
!> Usage (under mpirun): flash_like --outdir DIR [--backend mpiio|hdf5|pnetcdf] [--steps N]
!>                       [--checkpoint-every K] [--nblocks NB] [--nxb NXB] [--keep K] [--restart] [--quiet]
!>                       [--resume] [--batch] [--step-ms MS]
!> (--resume: restart if OUTDIR holds a checkpoint, else start afresh; --batch: ckptio_should_exit every step, on
!> the batch system's warning a final checkpoint and exit status 3 (EXIT_STOPPED), for the job script to requeue,
!> see examples/slurm/; --step-ms: sleep MS milliseconds per step, a stand-in for costlier physics.
!> --keep: retention, the newest K checkpoints stay, default 3, like ckptio.Series in flash_like.py. The Python
!> driver's --mode async, --stage-dir and --final-state have no Fortran counterpart.)
program flash_like
  use, intrinsic :: iso_c_binding, only: c_char, c_int, c_double, c_null_char
  use, intrinsic :: iso_fortran_env, only: int32, int64, real64, error_unit, output_unit
  use mpi_f08
  use ckptio
  implicit none

  integer, parameter :: dp = real64
  integer, parameter :: NVARS = 7, DENS = 1, PRES = 2, TEMP = 3, VELX = 4, VELY = 5, VELZ = 6, ENER = 7
  character(len=4), parameter :: GRID_VARS(NVARS) = ['dens', 'pres', 'temp', 'velx', 'vely', 'velz', 'ener']
  integer, parameter :: TRACER_WIDTH = 4
  integer, parameter :: NGUARD = 4                 ! guard cells per side (FLASH's default)
  character(len=*), parameter :: CHECKPOINT_PREFIX = 'chk', SIMULATION_NAME = 'flash_like'
  integer, parameter :: DEFAULT_NBLOCKS = 64, DEFAULT_NXB = 16
  real(dp), parameter :: DT_DEFAULT = 0.01_dp, GAMMA_M1 = 0.4_dp
  integer, parameter :: EXIT_STOPPED = 3           ! --batch: stopped early, final checkpoint committed

  interface
     pure real(c_double) function c_fmod(x, y) bind(C, name='fmod')
       import :: c_double
       real(c_double), value :: x, y
     end function c_fmod
     integer(c_int) function c_usleep(usec) bind(C, name='usleep')
       import :: c_int
       integer(c_int), value :: usec
     end function c_usleep
     integer(c_int) function c_mkdir(path, mode) bind(C, name='mkdir')
       import :: c_int, c_char
       character(kind=c_char), intent(in) :: path(*)
       integer(c_int), value :: mode
     end function c_mkdir
  end interface

  ! ---- the state of this rank (RankState of flash_like.py)
  integer(int64) :: step = 0
  real(dp) :: dt = DT_DEFAULT
  integer :: nblocks = 0, nxb = 0, first_block = 0, nlocal = 0
  real(dp), allocatable :: fld(:,:,:,:,:)          ! (1-NGUARD:nxb+NGUARD, x3, nlocal, NVARS)
  integer(int32), allocatable :: refine_level(:)   ! (nlocal)
  real(dp), allocatable :: bbox(:,:,:)             ! (2, 3, nlocal): lower/upper corner of x, y, z
  real(dp), allocatable :: tracers(:,:)            ! (TRACER_WIDTH, ntracers): x, y, z, pid
  integer(int64), allocatable :: tracer_block(:)   ! (ntracers)

  ! ---- options
  character(len=1024) :: outdir = ' ', backend = 'mpiio'
  integer :: steps = 20, checkpoint_every = 5, opt_nblocks = -1, opt_nxb = -1, keep = 3, step_ms = 0
  logical :: restart = .false., quiet = .false., resume = .false., batch = .false.

  integer :: rank, nranks, status, provided
  logical :: verbose

  ! MPI_THREAD_MULTIPLE, as mpi4py asks for in the Python driver: with Open MPI 4.1's default MPI-IO component
  ! (OMPIO), collective HDF5 writes were seen to lose data under MPI_THREAD_SINGLE/FUNNELED (see
  ! fortran_bindings/README.md, known limitations). Nothing else here needs threads.
  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  call parse_args()
  verbose = rank == 0 .and. .not. quiet
  status = run()
  call ckptio_finalize()
  call MPI_Finalize()
  if (status == EXIT_STOPPED) stop EXIT_STOPPED   ! stopped early on purpose: no error, no backtrace
  if (status /= 0) error stop status

contains

  ! ============================================================================ decomposition and geometry

  !> (first, count) of the contiguous block range owned by `r` of `nr` ranks (the first nblocks % nr get one more).
  subroutine block_range(nb, nr, r, first, count)
    integer, intent(in) :: nb, nr, r
    integer, intent(out) :: first, count
    integer :: base, extra
    base = nb / nr
    extra = mod(nb, nr)
    count = base
    if (r < extra) count = base + 1
    first = r * base + min(r, extra)
  end subroutine block_range

  integer function lattice_size(nb)
    integer, intent(in) :: nb
    lattice_size = 1
    do while (lattice_size**3 < nb)
       lattice_size = lattice_size + 1
    end do
  end function lattice_size

  !> Bounding boxes and refinement levels of the local blocks (block_bbox, block_refine_level).
  subroutine block_geometry()
    integer :: b, gb, m
    real(dp) :: ijk(3)
    m = lattice_size(nblocks)
    do b = 1, nlocal
       gb = first_block + b - 1
       ijk = [real(mod(gb, m), dp), real(mod(gb / m, m), dp), real(gb / (m * m), dp)]
       bbox(1, :, b) = ijk / real(m, dp)
       bbox(2, :, b) = (ijk + 1.0_dp) / real(m, dp)
       refine_level(b) = int(1 + mod(gb * 5, 3), int32)
    end do
  end subroutine block_geometry

  ! ============================================================================ initial condition and update

  elemental real(dp) function squash(a)
    real(dp), intent(in) :: a
    squash = a / (1.0_dp + abs(a))
  end function squash

  elemental real(dp) function total_energy(d, p, u, v, w)
    real(dp), intent(in) :: d, p, u, v, w
    total_energy = (p / GAMMA_M1) + ((0.5_dp * d) * (((u * u) + (v * v)) + (w * w)))
  end function total_energy

  !> numpy's float remainder (np.mod): fmod, then the result takes the sign of the divisor.
  elemental real(dp) function py_mod(a, b)
    real(dp), intent(in) :: a, b
    py_mod = c_fmod(a, b)
    if (py_mod /= 0.0_dp) then
       if ((b < 0.0_dp) .neqv. (py_mod < 0.0_dp)) py_mod = py_mod + b
    else
       py_mod = sign(0.0_dp, b)
    end if
  end function py_mod

  subroutine initial_state()
    integer :: b, i, j, k, gb, cnt, pid, ntr, n
    real(dp) :: frac(nxb), lo(3), width(3), x, y, z, dx, dy, dz, r2, d, p, u, v, w
    call block_range(nblocks, nranks, rank, first_block, nlocal)
    call allocate_state()
    call block_geometry()
    frac = (real([(i, i = 0, nxb - 1)], dp) + 0.5_dp) / real(nxb, dp)
    do b = 1, nlocal
       lo = bbox(1, :, b)
       width = bbox(2, :, b) - bbox(1, :, b)
       do k = 1, nxb
          do j = 1, nxb
             do i = 1, nxb
                x = lo(1) + width(1) * frac(i)
                y = lo(2) + width(2) * frac(j)
                z = lo(3) + width(3) * frac(k)
                dx = x - 0.5_dp
                dy = y - 0.5_dp
                dz = z - 0.5_dp
                r2 = ((dx * dx) + (dy * dy)) + (dz * dz)
                d = 1.0_dp + (1.0_dp / (1.0_dp + (20.0_dp * r2)))
                p = (1.0_dp + ((0.5_dp * x) * y)) + (0.25_dp * z)
                u = (-0.3_dp) * dy
                v = 0.3_dp * dx
                w = (0.1_dp * dz) * (1.0_dp - (2.0_dp * r2))
                fld(i, j, k, b, DENS) = d
                fld(i, j, k, b, PRES) = p
                fld(i, j, k, b, TEMP) = p / d
                fld(i, j, k, b, VELX) = u
                fld(i, j, k, b, VELY) = v
                fld(i, j, k, b, VELZ) = w
                fld(i, j, k, b, ENER) = total_energy(d, p, u, v, w)
             end do
          end do
       end do
    end do
    call fill_guard_cells()
    ! tracers: block gb holds (gb*7) % 5 + 1 particles, ordered by block, then pid
    ntr = 0
    do b = 1, nlocal
       ntr = ntr + mod((first_block + b - 1) * 7, 5) + 1
    end do
    allocate (tracers(TRACER_WIDTH, ntr), tracer_block(ntr))
    n = 0
    do b = 1, nlocal
       gb = first_block + b - 1
       cnt = mod(gb * 7, 5) + 1
       lo = bbox(1, :, b)
       width = bbox(2, :, b) - bbox(1, :, b)
       do pid = 0, cnt - 1
          n = n + 1
          tracers(1, n) = lo(1) + width(1) * (((2.0_dp * real(pid, dp)) + 1.0_dp) / (2.0_dp * real(cnt, dp)))
          tracers(2, n) = lo(2) + width(2) * ((real(mod(gb + 3 * pid, 7), dp) + 0.5_dp) / 7.0_dp)
          tracers(3, n) = lo(3) + width(3) * ((real(mod(3 * gb + 5 * pid, 11), dp) + 0.5_dp) / 11.0_dp)
          tracers(4, n) = real(pid, dp)
          tracer_block(n) = gb
       end do
    end do
  end subroutine initial_state

  subroutine allocate_state()
    if (allocated(fld)) deallocate (fld, refine_level, bbox)
    allocate (fld(1-NGUARD:nxb+NGUARD, 1-NGUARD:nxb+NGUARD, 1-NGUARD:nxb+NGUARD, nlocal, NVARS), &
         refine_level(nlocal), bbox(2, 3, nlocal))
  end subroutine allocate_state

  !> Guard cells from the interior of the same block (zero gradient). The update here is element-wise and reads
  !> no guard cell; a code with stencils would fill them from the neighbouring blocks instead. They are never
  !> written to a checkpoint (only the interiors are), and are filled again after a restart.
  subroutine fill_guard_cells()
    integer :: g
    do g = 1, NGUARD
       fld(1 - g, :, :, :, :) = fld(1, :, :, :, :)
       fld(nxb + g, :, :, :, :) = fld(nxb, :, :, :, :)
    end do
    do g = 1, NGUARD
       fld(:, 1 - g, :, :, :) = fld(:, 1, :, :, :)
       fld(:, nxb + g, :, :, :) = fld(:, nxb, :, :, :)
    end do
    do g = 1, NGUARD
       fld(:, :, 1 - g, :, :) = fld(:, :, 1, :, :)
       fld(:, :, nxb + g, :, :) = fld(:, :, nxb, :, :)
    end do
  end subroutine fill_guard_cells

  !> One step (advance): tracers move with the OLD velocities, then the element-wise field update.
  subroutine advance()
    real(dp), allocatable :: new(:,:,:,:,:)
    real(dp) :: time, forcing, relax, d, p, t, u, v, w, kinetic, nd, np_, nu, nv, nw
    real(dp) :: lo(3), width(3), pos(3), vel(3), moved(3)
    integer :: b, i, j, k, n, c, cell(3)
    ! ---- tracers (advance_tracers)
    do n = 1, size(tracer_block)
       b = int(tracer_block(n) - first_block) + 1
       lo = bbox(1, :, b)
       width = bbox(2, :, b) - bbox(1, :, b)
       pos = tracers(1:3, n)
       do c = 1, 3
          cell(c) = min(max(int(floor(((pos(c) - lo(c)) / width(c)) * real(nxb, dp))), 0), nxb - 1)
       end do
       do c = 1, 3
          vel(c) = fld(cell(1) + 1, cell(2) + 1, cell(3) + 1, b, VELX + c - 1)
       end do
       moved = pos + (dt * vel)
       tracers(1:3, n) = lo + py_mod(moved - lo, width)
    end do
    ! ---- fields (advance_fields)
    time = real(step, dp) * dt
    forcing = 1.0_dp + (0.5_dp * (time / (1.0_dp + time)))
    allocate (new, mold=fld)
    do b = 1, nlocal
       relax = dt / real(refine_level(b), dp)
       do k = 1, nxb
          do j = 1, nxb
             do i = 1, nxb
                d = fld(i, j, k, b, DENS)
                p = fld(i, j, k, b, PRES)
                t = fld(i, j, k, b, TEMP)
                u = fld(i, j, k, b, VELX)
                v = fld(i, j, k, b, VELY)
                w = fld(i, j, k, b, VELZ)
                kinetic = 0.5_dp * (((u * u) + (v * v)) + (w * w))
                nd = d + ((dt * 0.2_dp) * ((forcing + squash(p - 1.0_dp)) - d))
                np_ = (0.99_dp * p) + ((0.01_dp * d) * t)
                new(i, j, k, b, TEMP) = t + (dt * (kinetic - (0.1_dp * (t - 1.0_dp))))
                nu = (0.98_dp * u) - ((relax * squash(v - w)) * 0.1_dp)
                nv = (0.98_dp * v) + ((relax * squash((u - d) + p)) * 0.1_dp)
                nw = (0.98_dp * w) + ((relax * squash(d - p)) * 0.1_dp)
                new(i, j, k, b, DENS) = nd
                new(i, j, k, b, PRES) = np_
                new(i, j, k, b, VELX) = nu
                new(i, j, k, b, VELY) = nv
                new(i, j, k, b, VELZ) = nw
                new(i, j, k, b, ENER) = total_energy(nd, np_, nu, nv, nw)
             end do
          end do
       end do
    end do
    call move_alloc(new, fld)
    call fill_guard_cells()
    step = step + 1
  end subroutine advance

  ! ======================================================================================== checkpoint I/O

  !> Where the interior starts in fld(:,:,:,:,v) (0-based, Fortran order): NGUARD cells in, first block.
  function interior_start() result(start)
    integer(int64) :: start(4)
    start = [int(NGUARD, int64), int(NGUARD, int64), int(NGUARD, int64), 0_int64]
  end function interior_start

  function checkpoint_path(s) result(path)
    integer(int64), intent(in) :: s
    character(len=:), allocatable :: path
    character(len=16) :: num
    write (num, '(i6.6)') s
    path = trim(outdir) // '/' // CHECKPOINT_PREFIX // '_' // trim(num)
  end function checkpoint_path

  !> Write the state collectively: every rank declares its blocks and its tracer segments, close commits.
  subroutine write_checkpoint(path)
    character(len=*), intent(in) :: path
    type(ckptio_file) :: ck
    integer :: v
    integer(int64) :: nb, nx, first, loc
    nb = nblocks
    nx = nxb
    first = first_block
    loc = nlocal
    call ckptio_create(path, MPI_COMM_WORLD, ck, backend=trim(backend))
    ! The fields, bounding boxes and tracers are module arrays that stay unchanged until ckptio_close returns,
    ! and each one passed below is contiguous (no compiler temporary): zero-copy mode is safe and saves a copy
    ! of every field (by default ckptio_write copies; zero-copy blocks are checksummed again at the close).
    ! Each field is passed whole, guard cells included, with its interior as the memory selection: the backend
    ! writes the interiors straight from fld (an MPI memory datatype, an HDF5 memory dataspace or PnetCDF's
    ! flexible API), nothing is packed.
    call ckptio_set_zero_copy(ck, .true.)
    call ckptio_set_attr(ck, 'step', step)
    call ckptio_set_attr(ck, 'time', real(step, dp) * dt)
    call ckptio_set_attr(ck, 'dt', dt)
    call ckptio_set_attr(ck, 'nblocks', nb)
    call ckptio_set_attr(ck, 'nxb', nx)
    call ckptio_set_attr(ck, 'simulation', SIMULATION_NAME)
    ! the domain and root-block lattice as FLASH names them (ckptio convert --to flash needs them for yt), as the
    ! Python twin writes them: the unit cube, lattice_size(nblocks) root blocks along each axis, Cartesian
    call ckptio_set_attr(ck, 'geometry', 'cartesian')
    call ckptio_set_attr(ck, 'xmin', 0.0_dp)
    call ckptio_set_attr(ck, 'xmax', 1.0_dp)
    call ckptio_set_attr(ck, 'ymin', 0.0_dp)
    call ckptio_set_attr(ck, 'ymax', 1.0_dp)
    call ckptio_set_attr(ck, 'zmin', 0.0_dp)
    call ckptio_set_attr(ck, 'zmax', 1.0_dp)
    call ckptio_set_attr(ck, 'nblockx', int(lattice_size(nblocks), int64))
    call ckptio_set_attr(ck, 'nblocky', int(lattice_size(nblocks), int64))
    call ckptio_set_attr(ck, 'nblockz', int(lattice_size(nblocks), int64))
    do v = 1, NVARS   ! Fortran order (x, y, z, block) == Python's (block, z, y, x)
       call ckptio_write(ck, GRID_VARS(v), fld(:, :, :, :, v), offset=[0_int64, 0_int64, 0_int64, first], &
            global_shape=[nx, nx, nx, nb], interior_start=interior_start(), interior_shape=[nx, nx, nx, loc])
    end do
    call ckptio_write(ck, 'refine_level', refine_level, offset=[first], global_shape=[nb])
    call ckptio_write(ck, 'bbox', bbox, offset=[0_int64, 0_int64, first], global_shape=[2_int64, 3_int64, nb])
    call ckptio_write_segment(ck, 'tracers', tracers, rows=.true.)  ! (4, n): rows along n, Python's (n, 4)
    call ckptio_write_segment(ck, 'tracer_block', tracer_block)
    call ckptio_close(ck)                                       ! collective: I/O and atomic commit
  end subroutine write_checkpoint

  !> Read a checkpoint decomposed for the CURRENT number of ranks (read_checkpoint of flash_like.py).
  subroutine read_checkpoint(path)
    character(len=*), intent(in) :: path
    type(ckptio_file) :: ck
    character(len=64) :: simulation
    integer(int64) :: nb, nx, first, nvalues, nparticles
    integer :: tracer_rank
    integer(int64), allocatable :: shp(:), all_blocks(:)
    real(dp), allocatable :: all_tracers(:,:), flat(:)
    integer :: v, n, keep
    call ckptio_open(path, MPI_COMM_WORLD, ck)
    call ckptio_get_attr(ck, 'simulation', simulation)
    if (trim(simulation) /= SIMULATION_NAME) then
       if (rank == 0) write (error_unit, '(a)') 'flash_like: ' // path // ' is not a flash_like checkpoint'
       call MPI_Abort(MPI_COMM_WORLD, 1)
    end if
    call ckptio_get_attr(ck, 'step', step)
    call ckptio_get_attr(ck, 'dt', dt)
    call ckptio_get_attr(ck, 'nblocks', nb)
    call ckptio_get_attr(ck, 'nxb', nx)
    nblocks = int(nb)
    nxb = int(nx)
    call block_range(nblocks, nranks, rank, first_block, nlocal)
    first = first_block
    call allocate_state()
    do v = 1, NVARS
       call ckptio_inquire_var(ck, GRID_VARS(v), shape=shp)
       if (size(shp) /= 4 .or. any(shp /= [nx, nx, nx, nb])) then
          if (rank == 0) write (error_unit, '(a)') 'flash_like: ' // path // ': variable ' // GRID_VARS(v) // &
               ' does not have the expected shape'
          call MPI_Abort(MPI_COMM_WORLD, 1)
       end if
       call ckptio_read(ck, GRID_VARS(v), fld(:, :, :, :, v), offset=[0_int64, 0_int64, 0_int64, first], &
            interior_start=interior_start(), interior_shape=[nx, nx, nx, int(nlocal, int64)])
    end do
    call fill_guard_cells()
    call ckptio_read(ck, 'refine_level', refine_level, offset=[first])
    call ckptio_read(ck, 'bbox', bbox, offset=[0_int64, 0_int64, first])
    ! segments belong to the writer's ranks: read all of them and keep the particles of our blocks
    call ckptio_inquire_var(ck, 'tracers', shape=shp)   ! (4, n); (4n) in checkpoints before N-d segments
    tracer_rank = size(shp)
    nvalues = product(shp)
    call ckptio_inquire_var(ck, 'tracer_block', shape=shp)
    nparticles = shp(1)
    if (nvalues /= TRACER_WIDTH * nparticles) then
       if (rank == 0) write (error_unit, '(a)') 'flash_like: ' // path // ': tracer count mismatch'
       call MPI_Abort(MPI_COMM_WORLD, 1)
    end if
    allocate (all_blocks(nparticles))
    if (tracer_rank == 2) then
       allocate (all_tracers(TRACER_WIDTH, nparticles))
       call ckptio_read(ck, 'tracers', all_tracers)
    else
       allocate (flat(nvalues))
       call ckptio_read(ck, 'tracers', flat)          ! the 1-D variable of 4n values == (4, n) in memory
       all_tracers = reshape(flat, [int(TRACER_WIDTH, int64), nparticles])
    end if
    call ckptio_read(ck, 'tracer_block', all_blocks)
    call ckptio_close(ck)
    keep = count(all_blocks >= first .and. all_blocks < first + nlocal)
    if (allocated(tracers)) deallocate (tracers, tracer_block)
    allocate (tracers(TRACER_WIDTH, keep), tracer_block(keep))
    keep = 0
    do n = 1, int(nparticles)
       if (all_blocks(n) >= first .and. all_blocks(n) < first + nlocal) then
          keep = keep + 1
          tracers(:, keep) = all_tracers(:, n)
          tracer_block(keep) = all_blocks(n)
       end if
    end do
    call sort_tracers()
  end subroutine read_checkpoint

  !> Order the particles by (block, pid), as select_tracers does (usually they already are: insertion sort).
  subroutine sort_tracers()
    integer :: i, j
    real(dp) :: t(TRACER_WIDTH)
    integer(int64) :: blk
    do i = 2, size(tracer_block)
       t = tracers(:, i)
       blk = tracer_block(i)
       j = i - 1
       do while (j >= 1)
          if (.not. (tracer_block(j) > blk .or. (tracer_block(j) == blk .and. tracers(4, j) > t(4)))) exit
          tracers(:, j + 1) = tracers(:, j)
          tracer_block(j + 1) = tracer_block(j)
          j = j - 1
       end do
       tracers(:, j + 1) = t
       tracer_block(j + 1) = blk
    end do
  end subroutine sort_tracers

  ! ================================================================================================ driver

  integer function run() result(rc)
    character(len=1024) :: path
    real(dp) :: t0
    integer(c_int) :: ignored
    logical :: written, leave
    rc = 0
    if (rank == 0) call make_dirs(trim(outdir))
    call MPI_Barrier(MPI_COMM_WORLD)
    ! collective; the first call installs the signal handlers (SIGUSR1, SIGTERM), before the first step
    if (batch) call ckptio_should_exit(MPI_COMM_WORLD, leave)
    path = ' '
    if (restart .or. resume) then
       ! checksums verified, falling back past a corrupt or incomplete newest checkpoint (as the Python driver's
       ! Series.latest); ckptio_latest would only check completeness, and a corrupt newest one would abort the restart
       call ckptio_latest_verified(MPI_COMM_WORLD, trim(outdir), path, prefix=CHECKPOINT_PREFIX // '_')
       if (len_trim(path) == 0 .and. restart) then
          if (rank == 0) write (error_unit, '(a)') 'flash_like: --restart given but ' // trim(outdir) // &
               ' holds no complete checkpoint whose checksums verify'
          rc = 1
          return
       end if
    end if
    if (len_trim(path) > 0) then
       t0 = MPI_Wtime()
       call read_checkpoint(trim(path))
       if ((opt_nblocks > 0 .and. opt_nblocks /= nblocks) .or. (opt_nxb > 0 .and. opt_nxb /= nxb)) then
          if (rank == 0) write (error_unit, '(a)') 'flash_like: --nblocks/--nxb do not match the checkpoint'
          rc = 1
          return
       end if
       if (verbose) write (output_unit, '(*(g0))') 'restarted from ', trim(path), ': step ', step, ', t=', &
            num(real(step, dp) * dt, 4), ', ', nblocks, ' blocks of ', nxb, '^3 cells on ', nranks, ' ranks (', &
            num(MPI_Wtime() - t0, 3), ' s)'
    else
       nblocks = DEFAULT_NBLOCKS
       nxb = DEFAULT_NXB
       if (opt_nblocks > 0) nblocks = opt_nblocks
       if (opt_nxb > 0) nxb = opt_nxb
       call initial_state()
       if (verbose) write (output_unit, '(*(g0))') 'fresh start: ', nblocks, ' blocks of ', nxb, &
            '^3 cells on ', nranks, ' ranks, backend ', trim(backend)
    end if

    do while (step < steps)
       call advance()
       if (step_ms > 0) ignored = c_usleep(int(step_ms * 1000, c_int))
       written = mod(step, int(checkpoint_every, int64)) == 0
       if (written) call checkpoint()
       if (batch .and. step < steps) then
          ! the batch system wants the job gone soon: the same answer on every rank (one small allreduce)
          call ckptio_should_exit(MPI_COMM_WORLD, leave)
          if (leave) then
             if (verbose) write (output_unit, '(*(g0))') 'stopping at step ', step, ' (ckptio_should_exit)'
             if (.not. written) call checkpoint()          ! the final checkpoint
             if (verbose) write (output_unit, '(*(g0))') 'final checkpoint ', trim(checkpoint_path(step)), &
                  ' committed'
             rc = EXIT_STOPPED                             ! the job script requeues
             return
          end if
       end if
    end do
  end function run

  !> The checkpoint of the current step, retention, and (unless --quiet) a line of diagnostics. Collective.
  subroutine checkpoint()
    character(len=1024) :: path
    real(dp) :: t0, elapsed, dmin, dmax, lmin, lmax
    integer(int64) :: size_bytes
    path = checkpoint_path(step)
    t0 = MPI_Wtime()
    call write_checkpoint(trim(path))
    elapsed = MPI_Wtime() - t0
    call ckptio_prune(MPI_COMM_WORLD, trim(outdir), keep, prefix=CHECKPOINT_PREFIX)  ! retention
    if (.not. quiet) then   ! collective: every rank takes part
       lmin = huge(1.0_dp)
       lmax = -huge(1.0_dp)
       if (nlocal > 0) then
          lmin = minval(fld(1:nxb, 1:nxb, 1:nxb, :, DENS))
          lmax = maxval(fld(1:nxb, 1:nxb, 1:nxb, :, DENS))
       end if
       call MPI_Allreduce(lmin, dmin, 1, MPI_DOUBLE_PRECISION, MPI_MIN, MPI_COMM_WORLD)
       call MPI_Allreduce(lmax, dmax, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD)
    end if
    if (verbose) then
       inquire (file=trim(path), size=size_bytes)
       write (output_unit, '(a,i6,a,f8.4,*(g0))') 'step ', step, '  t=', real(step, dp) * dt, &
            '  dens [', num(dmin, 6), ', ', num(dmax, 6), ']  wrote ', trim(path), ' (', trim(backend), &
            ', ', num(real(size_bytes, dp) / 2.0_dp**20, 2), ' MiB, ', num(elapsed, 3), ' s)'
    end if
  end subroutine checkpoint

  !> x with d decimals, no blanks (Python's f"{x:.{d}f}")
  function num(x, d) result(text)
    real(dp), intent(in) :: x
    integer, intent(in) :: d
    character(len=:), allocatable :: text
    character(len=40) :: buf, fmt
    write (fmt, '(a,i0,a)') '(f40.', d, ')'
    write (buf, fmt) x
    text = trim(adjustl(buf))
    if (text(1:1) == '.') text = '0' // text
    if (text(1:2) == '-.') text = '-0' // text(2:)
  end function num

  !> mkdir -p (rank 0), through the C library: Fortran has no portable directory creation.
  subroutine make_dirs(dir)
    character(len=*), intent(in) :: dir
    integer :: i
    integer(c_int) :: ignored
    do i = 2, len(dir)
       if (dir(i:i) == '/') ignored = c_mkdir(dir(1:i - 1) // c_null_char, int(o'755', c_int))
    end do
    ignored = c_mkdir(dir // c_null_char, int(o'755', c_int))
  end subroutine make_dirs

  subroutine parse_args()
    integer :: i, n
    character(len=1024) :: arg, val
    n = command_argument_count()
    i = 1
    do while (i <= n)
       call get_command_argument(i, arg)
       select case (trim(arg))
       case ('--restart')
          restart = .true.
       case ('--quiet')
          quiet = .true.
       case ('--resume')
          resume = .true.
       case ('--batch')
          batch = .true.
       case ('-h', '--help')
          if (rank == 0) write (output_unit, '(a)') 'usage: flash_like --outdir DIR [--backend mpiio|hdf5|pnetcdf]'// &
               ' [--steps N] [--checkpoint-every K] [--nblocks NB] [--nxb NXB] [--keep K] [--restart] [--quiet]'// &
               ' [--resume] [--batch] [--step-ms MS]'
          call MPI_Finalize()
          stop
       case ('--outdir', '--backend', '--steps', '--checkpoint-every', '--nblocks', '--nxb', '--keep', '--step-ms')
          if (i == n) call usage_error('option ' // trim(arg) // ' needs a value')
          i = i + 1
          call get_command_argument(i, val)
          select case (trim(arg))
          case ('--outdir')
             outdir = val
          case ('--backend')
             backend = val
          case ('--steps')
             steps = int_arg(arg, val, 0)
          case ('--checkpoint-every')
             checkpoint_every = int_arg(arg, val, 1)
          case ('--nblocks')
             opt_nblocks = int_arg(arg, val, 1)
          case ('--nxb')
             opt_nxb = int_arg(arg, val, 1)
          case ('--keep')
             keep = int_arg(arg, val, 1)
          case ('--step-ms')
             step_ms = int_arg(arg, val, 0)
          end select
       case default
          call usage_error('unknown argument ' // trim(arg))
       end select
       i = i + 1
    end do
    if (len_trim(outdir) == 0) call usage_error('--outdir is required')
    if (trim(backend) /= 'mpiio' .and. trim(backend) /= 'hdf5' .and. trim(backend) /= 'pnetcdf') &
         call usage_error('--backend must be mpiio, hdf5 or pnetcdf')
  end subroutine parse_args

  integer function int_arg(name, text, minimum)
    character(len=*), intent(in) :: name, text
    integer, intent(in) :: minimum
    integer :: ios
    read (text, *, iostat=ios) int_arg
    if (ios /= 0) call usage_error(trim(name) // ': not an integer: ' // trim(text))
    if (int_arg < minimum) call usage_error(trim(name) // ': must be >= ' // achar(48 + minimum))
  end function int_arg

  subroutine usage_error(message)
    character(len=*), intent(in) :: message
    if (rank == 0) write (error_unit, '(a)') 'flash_like: ' // message // ' (see --help)'
    call MPI_Finalize()
    error stop 2
  end subroutine usage_error

end program flash_like
