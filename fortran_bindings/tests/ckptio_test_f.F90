!> ckptio_test_f -- Fortran test program of module ckptio, run under mpirun by tests/test_bindings.py.
!>
!>   ckptio_test_f layout DIR    write DIR/chk_000003 from column-major arrays (type(MPI_Comm)) and
!>                               DIR/ints_000001 (classic integer communicator), read them back with another
!>                               decomposition, check; rank 0 prints "LAYOUT OK". Python then checks the
!>                               documented global shapes and values.
!>   ckptio_test_f errors DIR    provoke errors with ierr present; every rank prints
!>                               "ERR <case> <rank> <status> <message>"
!>   ckptio_test_f abort DIR     open a missing checkpoint WITHOUT ierr: must print the message and MPI_Abort
!>   ckptio_test_f temporaries DIR   write through compiler temporaries (expression, explicit-shape and
!>                               contiguous dummies with copy-in, a 64 MiB expression), clobber the freed memory,
!>                               close, read back with another decomposition; zero-copy mode: correct use
!>                               works, a changed block fails the close on every rank. "TEMPORARIES OK"
!>   ckptio_test_f types DIR     logical and complex arrays, real32 attributes, ckptio_initialize; read back
!>                               with another decomposition; "TYPES OK" (Python checks the file)
!>   ckptio_test_f many DIR      batched reads (ckptio_batch_add + ckptio_read_many) of 40 real64 and 40 int32
!>                               variables, rank 0 with an empty batch; a non-contiguous request fails every
!>                               rank; ckptio_latest_verified. "MANY OK"
!>   ckptio_test_f series DIR    5 checkpoints of a series with keep=2 (ckptio_series_create), then restart
!>                               with ckptio_latest_verified: "SERIES OK <path>"
!>   ckptio_test_f background DIR   mode='async', stage_dir= and compression= of ckptio_create, ckptio_wait,
!>                               ckptio_done; background failures reported by ckptio_wait, ckptio_wait_all and
!>                               ckptio_finalize (MPI_THREAD_MULTIPLE); ERR lines and "BACKGROUND OK"
!>   ckptio_test_f selections DIR BACKEND   memory selections: the interiors of guard-celled arrays (real64, int32,
!>                               logical) written with interior_start=/interior_shape= (copying: then clobbered
!>                               before the close; zero-copy: guard cells changed before the close), read back
!>                               into the interiors of other guard-celled arrays on another decomposition
!>                               (guards untouched); bad selections fail (ERR lines). "SELECTIONS OK"
!>   ckptio_test_f series_bg DIR ckptio_series_create with mode='async' + compression= (step 1) and stage_dir=
!>                               (steps 2, 3), keep=2, each waited for; restart with ckptio_latest_verified and
!>                               ckptio_open(..., stage_dir=). "SERIES_BG OK <path>" (MPI_THREAD_MULTIPLE)
!>   ckptio_test_f multilevel DIR STAGE SCHEME PHASE   multi-level series (tests/test_bindings_multilevel.py, on
!>                               emulated nodes; STAGE node-local): PHASE "write": redundancy='raid' on the last
!>                               rank (ERR line), then steps 1-3 of x(5, 3+rank) with redundancy=SCHEME,
!>                               drain_every=2, keep=2, failure_group='rack<node's lowest rank mod 2>',
!>                               "ML_WRITE OK"; "restart": ckptio_latest_verified(...,
!>                               stage_dir=) must give DIR/chk_000003 and x reads back bit-identical,
!>                               "ML_RESTART OK <path>" (MPI_THREAD_MULTIPLE)
!>   ckptio_test_f varmeta DIR BACKEND   per-variable dims (Fortran order) and attributes (ckptio_set_dims,
!>                               ckptio_set_var_attr), Python checks them; a late declaration fails (ERR lines).
!>                               "VARMETA OK"
!>   ckptio_test_f should_exit DIR   ckptio_should_exit (type(MPI_Comm) and integer communicator): .false.
!>                               outside a batch job; after SIGUSR1 sent to itself by the last rank only, .true.
!>                               on every rank and it stays so. "SHOULD_EXIT OK"
!>   ckptio_test_f lifecycle DIR calls with a communicator before MPI_Init and after MPI_Finalize (ERR lines),
!>                               "LIFECYCLE OK"
program ckptio_test_f
  use, intrinsic :: iso_fortran_env, only: int32, int64, real32, real64, error_unit
  use mpi_f08
  use ckptio
  implicit none
  integer, parameter :: N1 = 4, N2 = 3, NK = 2     ! a(N1, N2, NK) per rank, decomposed along the last axis
  integer :: rank, nprocs, nargs, provided
  character(len=1024) :: mode, dir

  nargs = command_argument_count()
  call get_command_argument(1, mode)
  call get_command_argument(2, dir)
  if (trim(mode) == 'lifecycle') then                ! starts MPI itself
     call lifecycle()
     stop
  end if
  if (trim(mode) == 'background' .or. trim(mode) == 'series_bg' .or. trim(mode) == 'multilevel') then
     call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided)   ! what mode='async' needs
  else
     call MPI_Init()
  end if
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
  if (nargs < 2) then
     if (rank == 0) write (error_unit, '(a)') 'usage: ckptio_test_f layout|errors|abort|temporaries|types DIR'
     call MPI_Abort(MPI_COMM_WORLD, 2)
  end if
  select case (trim(mode))
  case ('layout')
     call layout()
  case ('errors')
     call errors()
  case ('abort')
     call abort_without_ierr()
  case ('temporaries')
     call temporaries()
  case ('types')
     call types()
  case ('many')
     call many()
  case ('series')
     call series()
  case ('background')
     call background()                       ! (calls ckptio_finalize itself)
  case ('selections')
     call selections()
  case ('varmeta')
     call varmeta()
  case ('series_bg')
     call series_bg()
  case ('should_exit')
     call should_exit()
  case ('multilevel')
     call multilevel()
  case default
     call MPI_Abort(MPI_COMM_WORLD, 2)
  end select
  if (trim(mode) /= 'background') call ckptio_finalize()
  call MPI_Finalize()

contains

  subroutine expect(cond, what)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: what
    if (.not. cond) then
       write (error_unit, '(a,i0,a,a)') 'rank ', rank, ': check failed: ', what
       call MPI_Abort(MPI_COMM_WORLD, 3)
    end if
  end subroutine expect

  real(real64) function aval(i, j, k)       ! global 1-based indices
    integer, intent(in) :: i, j, k
    aval = real(i, real64) + 100.0_real64 * j + 10000.0_real64 * k + 0.5_real64
  end function aval

  subroutine layout()
    real(real64), allocatable :: a(:,:,:), back(:,:,:)
    integer(int32), allocatable :: b(:,:), b2(:,:)
    integer(int64), allocatable :: seg(:), allseg(:), shp(:)
    real(real32) :: r4(5)
    real(real64), allocatable :: tr(:,:)
    type(ckptio_file) :: f
    integer :: i, j, k, other, dtype, ierr, icomm
    integer(int32) :: step4
    integer(int64) :: step8, nseg
    real(real64) :: t
    character(len=64) :: label
    character(len=1024) :: path, found

    allocate (a(N1, N2, NK), back(N1, N2, NK))
    do k = 1, NK
       do j = 1, N2
          do i = 1, N1
             a(i, j, k) = aval(i, j, rank * NK + k)
          end do
       end do
    end do
    allocate (seg(rank + 1))
    seg = [(100_int64 * rank + i, i = 0, rank)]
    r4 = [(real(rank, real32) + 0.25_real32 * i, i = 1, 5)]

    ! ---- write with an mpi_f08 communicator
    path = trim(dir) // '/chk_000003'
    call ckptio_create(path, MPI_COMM_WORLD, f, backend='mpiio')
    call ckptio_write(f, 'a', a, offset=[0_int64, 0_int64, int(rank * NK, int64)], &
         global_shape=[int(N1, int64), int(N2, int64), int(nprocs * NK, int64)])
    call ckptio_write(f, 'r4', r4, offset=[int(5 * rank, int64)], global_shape=[int(5 * nprocs, int64)])
    call ckptio_write_segment(f, 'seg', seg)
    ! an N-d segment: mod(rank, 3) rows of 3 values, rows along the LAST dimension (Python's (n, 3))
    allocate (tr(3, mod(rank, 3)))
    tr = reshape([(real(rank, real64) * 10 + i * 0.5_real64, i = 1, size(tr))], shape(tr))
    call ckptio_write_segment(f, 'tr', tr, rows=.true.)
    call ckptio_set_attr(f, 'step', 3)                 ! integer(int32)
    call ckptio_set_attr(f, 'big', 9000000000_int64)   ! integer(int64)
    call ckptio_set_attr(f, 'time', 0.375_real64)
    call ckptio_set_attr(f, 'label', 'fortran layout   ')   ! trailing blanks are dropped
    call ckptio_close(f)

    ! ---- a second checkpoint through a classic integer communicator handle
    icomm = MPI_COMM_WORLD%MPI_VAL
    allocate (b(N1, 2), b2(N1, 2))
    b = reshape([(i + 10 * rank, i = 1, 2 * N1)], [N1, 2])
    call ckptio_create(trim(dir) // '/ints_000001', icomm, f, ierr=ierr)
    call expect(ierr == CKPTIO_OK, 'create with integer comm')
    call ckptio_write(f, 'b', b, offset=[0_int64, int(2 * rank, int64)], &
         global_shape=[int(N1, int64), int(2 * nprocs, int64)], ierr=ierr)
    call expect(ierr == CKPTIO_OK, 'write b')
    call ckptio_close(f, ierr)
    call expect(ierr == CKPTIO_OK, 'close b')

    ! ---- latest: collective (mpi_f08 and integer comm) and local
    call ckptio_latest(MPI_COMM_WORLD, dir, found)
    call expect(trim(found) == trim(path), 'latest (f08) = ' // trim(found))
    call ckptio_latest(icomm, dir, found, prefix='ints')
    call expect(trim(found) == trim(dir) // '/ints_000001', 'latest (int) = ' // trim(found))
    call ckptio_latest(dir, found, prefix='nothing')
    call expect(len_trim(found) == 0, 'latest of nothing is blank')

    ! ---- read back: rank r reads the planes of rank P-1-r
    other = nprocs - 1 - rank
    call ckptio_open(path, MPI_COMM_WORLD, f)
    call ckptio_inquire_var(f, 'a', dtype=dtype, shape=shp)
    call expect(dtype == CKPTIO_FLOAT64, 'dtype of a')
    call expect(size(shp) == 3, 'rank of a')
    call expect(all(shp == [int(N1, int64), int(N2, int64), int(nprocs * NK, int64)]), 'Fortran-order shape of a')
    call ckptio_read(f, 'a', back, offset=[0_int64, 0_int64, int(other * NK, int64)])
    do k = 1, NK
       do j = 1, N2
          do i = 1, N1
             call expect(back(i, j, k) == aval(i, j, other * NK + k), 'value of a')
          end do
       end do
    end do
    call ckptio_read(f, 'r4', r4, offset=[int(5 * other, int64)])
    call expect(all(r4 == [(real(other, real32) + 0.25_real32 * i, i = 1, 5)]), 'r4')
    call ckptio_inquire_var(f, 'seg', shape=shp)
    nseg = shp(1)
    call expect(nseg == int(nprocs, int64) * (nprocs + 1) / 2, 'segment length')
    allocate (allseg(nseg))
    call ckptio_read(f, 'seg', allseg)
    call expect(allseg(size(allseg)) == 100_int64 * (nprocs - 1) + nprocs - 1, 'last segment value')
    call ckptio_get_attr(f, 'step', step4)
    call ckptio_get_attr(f, 'step', step8)
    call expect(step4 == 3 .and. step8 == 3_int64, 'step')
    call ckptio_get_attr(f, 'big', step8)
    call expect(step8 == 9000000000_int64, 'big')
    call ckptio_get_attr(f, 'big', step4, ierr)
    call expect(ierr == CKPTIO_ERR_ARGUMENT, 'int64 attribute does not fit int32')
    call ckptio_get_attr(f, 'time', t)
    call expect(t == 0.375_real64, 'time')
    call ckptio_get_attr(f, 'label', label)
    call expect(label == 'fortran layout', 'label')
    call ckptio_close(f)

    call ckptio_open(trim(dir) // '/ints_000001', icomm, f)
    call ckptio_read(f, 'b', b2, offset=[0_int64, int(2 * other, int64)])
    call expect(all(b2 == reshape([(i + 10 * other, i = 1, 2 * N1)], [N1, 2])), 'b')
    call ckptio_close(f)
    if (rank == 0) print '(a,i0,a)', 'LAYOUT OK ', nprocs, ' ranks'
  end subroutine layout

  subroutine report(name, ierr)
    character(len=*), intent(in) :: name
    integer, intent(in) :: ierr
    character(len=:), allocatable :: msg
    character(len=4096) :: dir, path
    integer :: i, dlen, dstat, u, ios
    msg = ckptio_error_message()
    do i = 1, len(msg)
       if (msg(i:i) == new_line('a')) msg(i:i) = '|'
    end do
    if (ierr == CKPTIO_OK) msg = '-'
    ! with CKPTIO_TEST_REPORT_DIR set, to DIR/report.<rank> (long lines of several ranks interleave on stdout)
    call get_environment_variable('CKPTIO_TEST_REPORT_DIR', dir, length=dlen, status=dstat)
    if (dstat == 0 .and. dlen > 0) then
       write (path, '(a,a,i0)') trim(dir), '/report.', rank
       open (newunit=u, file=trim(path), position='append', action='write', iostat=ios)
       if (ios == 0) then
          write (u, '(a,1x,a,1x,i0,1x,i0,1x,a)') 'ERR', name, rank, ierr, msg
          close (u)
          return
       end if
    end if
    print '(a,1x,a,1x,i0,1x,i0,1x,a)', 'ERR', name, rank, ierr, msg
    flush (6)
  end subroutine report

  !> Memory selections: u(1-G:N1+G, 1-G:N2+G, 1-G:NK+G) with G guard cells, its interior u(1:N1, 1:N2, 1:NK)
  !> is rank's block of the global (N1, N2, NK*nprocs) array (Fortran order).
  subroutine selections()
    integer, parameter :: G = 2
    real(real64), allocatable, target :: u(:,:,:), uz(:,:,:)
    integer(int32), allocatable, target :: b(:,:)
    logical, allocatable :: mask(:,:,:)
    type(ckptio_file) :: f
    type(ckptio_read_batch) :: batch
    integer :: i, j, k, other, ierr
    integer(int64) :: box(3), at(3), gshape(3), start(3)
    character(len=1024) :: backend, path

    backend = 'mpiio'
    if (command_argument_count() > 2) call get_command_argument(3, backend)
    allocate (u(1-G:N1+G, 1-G:N2+G, 1-G:NK+G), uz(1-G:N1+G, 1-G:N2+G, 1-G:NK+G), b(0:N1+1, N2), &
         mask(1-G:N1+G, 1-G:N2+G, 1-G:NK+G))
    u = -1.0_real64
    b = -1
    mask = .true.
    do k = 1, NK
       do j = 1, N2
          do i = 1, N1
             u(i, j, k) = aval(i, j, rank * NK + k)
             mask(i, j, k) = mod(i + j + rank * NK + k, 3) == 0
          end do
       end do
    end do
    uz = u
    do j = 1, N2
       b(1:N1, j) = [(i + 10 * j + 100 * rank, i = 1, N1)]
    end do
    box = [int(N1, int64), int(N2, int64), int(NK, int64)]
    start = [int(G, int64), int(G, int64), int(G, int64)]       ! 0-based: u(1,1,1) is element G of each axis
    gshape = [int(N1, int64), int(N2, int64), int(NK * nprocs, int64)]
    at = [0_int64, 0_int64, int(rank * NK, int64)]
    write (path, '(a,a)') trim(dir), '/chk_000001'
    call ckptio_create(trim(path), MPI_COMM_WORLD, f, backend=trim(backend))
    call ckptio_write(f, 'u', u, at, gshape, interior_start=start, interior_shape=box)
    call ckptio_write(f, 'b', b, [0_int64, int(rank * N2, int64)], [int(N1, int64), int(N2 * nprocs, int64)], &
         interior_start=[1_int64, 0_int64], interior_shape=[int(N1, int64), int(N2, int64)])
    if (trim(backend) /= 'pnetcdf') &
         call ckptio_write(f, 'mask', mask, at, gshape, interior_start=start, interior_shape=box)
    call ckptio_set_zero_copy(f, .true.)
    call ckptio_write(f, 'uz', uz, at, gshape, interior_start=start, interior_shape=box)
    u = -2.0_real64                      ! copied at write: the checkpoint keeps the old interior
    b = -2
    mask = .false.
    uz(1-G, :, :) = -3.0_real64          ! zero-copy: only the interior must stay unchanged until the close
    call ckptio_close(f)

    ! read into the interiors of the same arrays, rank r taking rank P-1-r's part; guard cells stay -5
    other = nprocs - 1 - rank
    u = -5.0_real64
    uz = -5.0_real64
    b = -5
    mask = .true.
    call ckptio_open(trim(path), MPI_COMM_WORLD, f)
    at = [0_int64, 0_int64, int(other * NK, int64)]
    call ckptio_read(f, 'u', u, at, interior_start=start, interior_shape=box)
    call ckptio_read(f, 'uz', uz, at, interior_start=start, interior_shape=box)
    call ckptio_read(f, 'b', b, [0_int64, int(other * N2, int64)], interior_start=[1_int64, 0_int64], &
         interior_shape=[int(N1, int64), int(N2, int64)])
    if (trim(backend) /= 'pnetcdf') &
         call ckptio_read(f, 'mask', mask, at, interior_start=start, interior_shape=box)
    call ckptio_close(f)
    do k = 1 - G, NK + G
       do j = 1 - G, N2 + G
          do i = 1 - G, N1 + G
             if (i >= 1 .and. i <= N1 .and. j >= 1 .and. j <= N2 .and. k >= 1 .and. k <= NK) then
                call expect(u(i, j, k) == aval(i, j, other * NK + k), 'u interior')
                call expect(uz(i, j, k) == aval(i, j, other * NK + k), 'uz interior')
                call expect(mask(i, j, k) .eqv. (trim(backend) == 'pnetcdf' .or. &
                     mod(i + j + other * NK + k, 3) == 0), 'mask interior')
             else
                call expect(u(i, j, k) == -5.0_real64 .and. uz(i, j, k) == -5.0_real64, 'guard cells untouched')
                call expect(mask(i, j, k), 'logical guard cells untouched')
             end if
          end do
       end do
    end do
    do j = 1, N2
       call expect(all(b(1:N1, j) == [(i + 10 * j + 100 * other, i = 1, N1)]), 'b interior')
       call expect(b(0, j) == -5 .and. b(N1 + 1, j) == -5, 'b guard cells')
    end do

    ! the same with one batched read (ckptio_batch_add with the interior, ckptio_read_many)
    u = -6.0_real64
    b = -6
    write (path, '(a,a)') trim(dir), '/chk_000001'
    call ckptio_open(trim(path), MPI_COMM_WORLD, f)
    call ckptio_batch_add(batch, 'u', u, at, interior_start=start, interior_shape=box)
    call ckptio_batch_add(batch, 'b', b, [0_int64, int(other * N2, int64)], interior_start=[1_int64, 0_int64], &
         interior_shape=[int(N1, int64), int(N2, int64)])
    call ckptio_read_many(f, batch)
    call ckptio_close(f)
    do k = 1 - G, NK + G
       do j = 1 - G, N2 + G
          do i = 1 - G, N1 + G
             if (i >= 1 .and. i <= N1 .and. j >= 1 .and. j <= N2 .and. k >= 1 .and. k <= NK) then
                call expect(u(i, j, k) == aval(i, j, other * NK + k), 'u interior (batch)')
             else
                call expect(u(i, j, k) == -6.0_real64, 'guard cells untouched (batch)')
             end if
          end do
       end do
    end do
    do j = 1, N2
       call expect(all(b(1:N1, j) == [(i + 10 * j + 100 * other, i = 1, N1)]), 'b interior (batch)')
       call expect(b(0, j) == -6 .and. b(N1 + 1, j) == -6, 'b guard cells (batch)')
    end do

    ! bad selections: on the last rank only; the close then fails on every rank
    write (path, '(a,a)') trim(dir), '/chk_000002'
    call ckptio_create(trim(path), MPI_COMM_WORLD, f, backend=trim(backend))
    if (rank == nprocs - 1) then
       call ckptio_write(f, 'u', u, at, gshape, ierr=ierr, interior_start=[0_int64, 0_int64, int(2 * G + 1, int64)], &
            interior_shape=box)
    else
       call ckptio_write(f, 'u', u, at, gshape, ierr=ierr, interior_start=start, interior_shape=box)
    end if
    call report('interior_outside', ierr)
    call ckptio_write(f, 'v', u, at, gshape, ierr=ierr, interior_start=start)
    call report('interior_half', ierr)
    call ckptio_close(f, ierr=ierr)
    call report('close_after_bad_interior', ierr)
    if (rank == 0) print '(a)', 'SELECTIONS OK'
  end subroutine selections

  subroutine varmeta()
    real(real64), allocatable :: a(:,:,:)
    type(ckptio_file) :: f
    integer :: ierr
    character(len=1024) :: backend, path
    backend = 'mpiio'
    if (command_argument_count() > 2) call get_command_argument(3, backend)
    allocate (a(N1, N2, NK))
    a = rank
    write (path, '(a,a)') trim(dir), '/chk_000001'
    call ckptio_create(trim(path), MPI_COMM_WORLD, f, backend=trim(backend))
    call ckptio_set_dims(f, 'a', ['x   ', 'y   ', 'zone'])          ! Fortran order: a(x, y, zone)
    call ckptio_set_var_attr(f, 'a', 'units', 'g/cm^3')
    call ckptio_set_var_attr(f, 'a', 'gamma', 1.5_real32)
    call ckptio_set_var_attr(f, 'a', 'level', 2)
    call ckptio_write(f, 'a', a, [0_int64, 0_int64, int(rank * NK, int64)], &
         [int(N1, int64), int(N2, int64), int(NK * nprocs, int64)])
    call ckptio_close(f)
    write (path, '(a,a)') trim(dir), '/chk_000002'
    call ckptio_create(trim(path), MPI_COMM_WORLD, f, backend=trim(backend))
    call ckptio_write(f, 'a', a, [0_int64, 0_int64, int(rank * NK, int64)], &
         [int(N1, int64), int(N2, int64), int(NK * nprocs, int64)])
    ierr = CKPTIO_OK
    if (rank == nprocs - 1) call ckptio_set_dims(f, 'a', ['x', 'y', 'z'], ierr=ierr)
    call report('dims_after_write', ierr)
    call ckptio_close(f, ierr=ierr)
    call report('close_after_late_dims', ierr)
    if (rank == 0) print '(a)', 'VARMETA OK'
  end subroutine varmeta

  subroutine errors()
    type(ckptio_file) :: f, closed
    real(real64), target :: x(4, 2)
    real(real64) :: y(4, 2)
    real(real32) :: z(4, 2)
    real(real64) :: w(2, 2)
    integer(int64) :: g(2), o(2)
    character(len=4) :: short
    character(len=1024) :: path
    integer :: ierr
    integer(int64) :: t8
    x = 1
    w = 2
    g = [4_int64, int(2 * nprocs, int64)]
    o = [0_int64, int(2 * rank, int64)]
    path = trim(dir) // '/chk_000001'
    call ckptio_create(path, MPI_COMM_WORLD, f)
    call ckptio_write(f, 'x', x, o, g)
    call ckptio_set_attr(f, 'label', 'a string')
    call ckptio_close(f)

    call ckptio_open(path, MPI_COMM_WORLD, f)
    call ckptio_read(f, 'nope', y, o, ierr)
    call report('unknown_variable', ierr)
    call ckptio_read(f, 'x', z, o, ierr)
    call report('wrong_dtype', ierr)
    call ckptio_read(f, 'x', y, [0_int64], ierr)
    call report('wrong_offset_size', ierr)
    call ckptio_read(f, 'x', x(1:4:2, :), o, ierr)          ! non-contiguous: collective failure
    call report('noncontiguous_read', ierr)
    call ckptio_get_attr(f, 'label', short, ierr)
    call report('string_too_long', ierr)
    call ckptio_read(f, 'x', y, o, ierr)                    ! still usable
    call expect(ierr == CKPTIO_OK .and. all(y == 1), 'read after errors')
    call ckptio_close(f)
    call ckptio_close(f, ierr)
    call report('double_close', ierr)

    call ckptio_open(trim(dir) // '/no_such_checkpoint', MPI_COMM_WORLD, f, ierr)
    call report('bad_path', ierr)
    call ckptio_write(closed, 'x', x, o, g, ierr)
    call report('not_open', ierr)

    ! a non-contiguous array on one rank: that write fails locally, the close on every rank
    call ckptio_create(path, MPI_COMM_WORLD, f)
    if (rank == 0) then
       call ckptio_write(f, 'x', x(1:4:2, :), o, [2_int64, int(2 * nprocs, int64)], ierr)
    else
       call ckptio_write(f, 'x', w, o, [2_int64, int(2 * nprocs, int64)], ierr)
    end if
    call report('noncontiguous_write', ierr)
    call ckptio_close(f, ierr)
    call report('close_after_noncontiguous', ierr)
    ! inconsistent global shapes between ranks: DeclarationError at close on every rank
    call ckptio_create(path, MPI_COMM_WORLD, f)
    call ckptio_write(f, 'x', x, o, [4_int64, int(2 * nprocs + rank, int64)])
    call ckptio_close(f, ierr)
    call report('inconsistent_shape', ierr)
    ! a block outside the global shape: the message shows Fortran-order shapes, as declared
    call ckptio_create(path, MPI_COMM_WORLD, f)
    call ckptio_write(f, 'x', x, [1_int64, int(2 * rank, int64)], [4_int64, int(2 * nprocs, int64)])
    call ckptio_close(f, ierr=ierr)
    call report('outside_global_shape', ierr)
    ! Fortran names in messages: generic ckptio_get_attr, ckptio_write_segment
    call ckptio_open(trim(dir) // '/chk_000001', MPI_COMM_WORLD, f)
    call ckptio_get_attr(f, 'nope', t8, ierr=ierr)
    call report('get_attr_name', ierr)
    call ckptio_close(f)
    call ckptio_create(path, MPI_COMM_WORLD, f)
    call ckptio_write_segment(f, 's', x(1:4:2, :), ierr=ierr)
    call report('segment_name', ierr)
    call ckptio_close(f, ierr=ierr)

    ! ckptio_create on a handle that still holds an open writer: an error, the pending checkpoint survives
    path = trim(dir) // '/chk_000004'
    call ckptio_create(path, MPI_COMM_WORLD, f)
    call ckptio_write(f, 'x', x, o, g)
    call ckptio_create(trim(dir) // '/chk_000005', MPI_COMM_WORLD, f, ierr=ierr)
    call report('create_on_open_handle', ierr)
    call ckptio_close(f, ierr=ierr)
    call expect(ierr == CKPTIO_OK, 'the pending checkpoint is still committed')
    ! ckptio_open on a handle still open on one rank (a writer on MPI_COMM_SELF): collective failure on every
    ! rank; that rank's writer stays usable and commits
    if (rank == 0) then
       call ckptio_create(trim(dir) // '/self_000001', MPI_COMM_SELF, f)
       call ckptio_write(f, 'x', x, [0_int64, 0_int64], [4_int64, 2_int64])
    end if
    call ckptio_open(path, MPI_COMM_WORLD, f, ierr=ierr)
    call report('open_on_open_handle', ierr)
    if (rank == 0) then
       call ckptio_close(f, ierr=ierr)
       call expect(ierr == CKPTIO_OK, 'the writer that stayed open commits')
    end if
    call ckptio_open(path, MPI_COMM_WORLD, f)
    call ckptio_read(f, 'x', y, o)
    call expect(all(y == 1), 'read after the failed open')
    call ckptio_close(f)
  end subroutine errors

  ! ---- writes through compiler temporaries: safe because ckptio_write copies by default

  !> The actual argument is a non-contiguous section: the compiler copies it into a temporary for x (copy-in),
  !> which is freed when this routine returns -- long before ckptio_close.
  subroutine write_explicit(f, name, x, n, offset, gshape)
    type(ckptio_file), intent(inout) :: f
    character(len=*), intent(in) :: name
    integer, intent(in) :: n
    real(real64), intent(in) :: x(n)
    integer(int64), intent(in) :: offset(:), gshape(:)
    integer :: ierr
    call ckptio_write(f, name, x, offset, gshape, ierr=ierr)
    call expect(ierr == CKPTIO_OK, 'write through an explicit-shape dummy')
  end subroutine write_explicit

  subroutine write_contiguous(f, name, x, offset, gshape)
    type(ckptio_file), intent(inout) :: f
    character(len=*), intent(in) :: name
    real(real64), contiguous, intent(in) :: x(:)
    integer(int64), intent(in) :: offset(:), gshape(:)
    integer :: ierr
    call ckptio_write(f, name, x, offset, gshape, ierr=ierr)
    call expect(ierr == CKPTIO_OK, 'write through a contiguous dummy')
  end subroutine write_contiguous

  !> A 64 MiB (global) expression: a heap temporary, unmapped when freed.
  subroutine write_big_expression(f, big, offset, gshape, seconds)
    type(ckptio_file), intent(inout) :: f
    real(real64), intent(in) :: big(:)
    integer(int64), intent(in) :: offset(:), gshape(:)
    real(real64), intent(out) :: seconds
    integer :: ierr
    seconds = MPI_Wtime()
    call ckptio_write(f, 'big', big + 0.5_real64, offset, gshape, ierr=ierr)
    seconds = MPI_Wtime() - seconds
    call expect(ierr == CKPTIO_OK, 'write of a big expression')
  end subroutine write_big_expression

  !> Reuse the memory the temporaries had (heap and stack) with other values.
  subroutine clobber(n)
    integer(int64), intent(in) :: n
    real(real64), allocatable :: junk(:)
    real(real64) :: onstack(4096)
    allocate (junk(2 * n))
    junk = -7.0_real64
    onstack = -9.0_real64
    call expect(junk(n) + onstack(100) < 0, 'clobber')
  end subroutine clobber

  subroutine temporaries()
    integer, parameter :: n = 1000
    integer(int64) :: nbig, i8
    real(real64), allocatable :: a(:), wide(:), big(:), back(:), bigback(:)
    type(ckptio_file) :: f
    integer :: i, other, ierr
    character(len=1024) :: path, found
    real(real64) :: t_copy, t_zero, t_close_copy, t_close_zero
    nbig = 64_int64 * 1024 * 1024 / 8 / nprocs        ! 64 MiB of float64 in total
    allocate (a(n), wide(2 * n), back(n), big(nbig), bigback(nbig))
    a = [(real(rank * n + i, real64), i = 1, n)]
    wide = [(real(rank * 2 * n + i, real64) + 0.25_real64, i = 1, 2 * n)]
    big = [(real(rank * nbig + i8, real64), i8 = 1, nbig)]
    other = nprocs - 1 - rank

    ! ---- default mode: every write copies, so temporaries are fine
    path = trim(dir) // '/chk_000001'
    call ckptio_create(path, MPI_COMM_WORLD, f)
    call ckptio_write(f, 'expr', a * 2.0_real64, [int(rank * n, int64)], [int(nprocs * n, int64)], ierr=ierr)
    call expect(ierr == CKPTIO_OK, 'write of an expression')
    call write_explicit(f, 'explicit', wide(1:2 * n:2), n, [int(rank * n, int64)], [int(nprocs * n, int64)])
    call write_contiguous(f, 'contig', wide(2:2 * n:2), [int(rank * n, int64)], [int(nprocs * n, int64)])
    call write_big_expression(f, big, [rank * nbig], [nprocs * nbig], t_copy)
    call clobber(nbig)
    t_close_copy = MPI_Wtime()
    call ckptio_close(f, ierr=ierr)
    t_close_copy = MPI_Wtime() - t_close_copy
    call expect(ierr == CKPTIO_OK, 'close after writes of temporaries: ' // ckptio_error_message())

    ! ---- restart: read every variable back with another decomposition (rank r reads rank P-1-r's block)
    call ckptio_open(path, MPI_COMM_WORLD, f)
    call ckptio_read(f, 'expr', back, offset=[int(other * n, int64)])
    call expect(all(back == [(2.0_real64 * (other * n + i), i = 1, n)]), 'values of the expression')
    call ckptio_read(f, 'explicit', back, offset=[int(other * n, int64)])
    call expect(all(back == [(real(other * 2 * n + 2 * i - 1, real64) + 0.25_real64, i = 1, n)]), &
         'values of the explicit-shape copy-in')
    call ckptio_read(f, 'contig', back, offset=[int(other * n, int64)])
    call expect(all(back == [(real(other * 2 * n + 2 * i, real64) + 0.25_real64, i = 1, n)]), &
         'values of the contiguous copy-in')
    call ckptio_read(f, 'big', bigback, offset=[other * nbig])
    call expect(all(bigback == [(real(other * nbig + i8, real64) + 0.5_real64, i8 = 1, nbig)]), &
         'values of the big expression')
    call ckptio_close(f)

    ! ---- zero-copy mode, used correctly: the same bits, without the copy
    path = trim(dir) // '/chk_000002'
    call ckptio_create(path, MPI_COMM_WORLD, f)
    call ckptio_set_zero_copy(f, .true.)
    t_zero = MPI_Wtime()
    call ckptio_write(f, 'big', big, [rank * nbig], [nprocs * nbig], ierr=ierr)
    t_zero = MPI_Wtime() - t_zero
    call expect(ierr == CKPTIO_OK, 'zero-copy write')
    t_close_zero = MPI_Wtime()
    call ckptio_close(f, ierr=ierr)
    t_close_zero = MPI_Wtime() - t_close_zero
    call expect(ierr == CKPTIO_OK, 'zero-copy close: ' // ckptio_error_message())
    call ckptio_open(path, MPI_COMM_WORLD, f)
    call ckptio_read(f, 'big', bigback, offset=[other * nbig])
    call expect(all(bigback == [(real(other * nbig + i8, real64), i8 = 1, nbig)]), 'values of zero-copy big')
    call ckptio_close(f)

    ! ---- zero-copy mode, memory changed on one rank before close: fails on every rank, nothing committed
    path = trim(dir) // '/chk_000003'
    call ckptio_create(path, MPI_COMM_WORLD, f)
    call ckptio_set_zero_copy(f, .true.)
    call ckptio_write(f, 'a', a, [int(rank * n, int64)], [int(nprocs * n, int64)])
    if (rank == 0) a(5) = -1.0_real64
    call ckptio_close(f, ierr=ierr)
    call report('zero_copy_changed', ierr)
    call ckptio_latest(MPI_COMM_WORLD, dir, found)
    call expect(trim(found) == trim(dir) // '/chk_000002', 'nothing committed: latest is ' // trim(found))

    if (rank == 0) print '(a,4(1x,a,es10.3))', 'TIMING', 'write_copy_s', t_copy, 'write_zero_copy_s', t_zero, &
         'close_copy_s', t_close_copy, 'close_zero_copy_s', t_close_zero
    if (rank == 0) print '(a,i0,a)', 'TEMPORARIES OK ', nprocs, ' ranks'
  end subroutine temporaries

  ! ---- logical and complex arrays, real32 attributes, ckptio_initialize
  subroutine types()
    logical :: l(3, 2), lback(3, 2)
    complex(real32) :: c4(5), c4back(5)
    complex(real64) :: c8(2, 3), c8back(2, 3)
    logical, allocatable :: lseg(:), lall(:)
    type(ckptio_file) :: f
    integer :: i, j, other, dtype, ierr
    integer(int64), allocatable :: shp(:)
    real(real32) :: r4
    real(real64) :: r8
    character(len=1024) :: path
    call ckptio_initialize(ierr=ierr)
    call expect(ierr == CKPTIO_OK, 'ckptio_initialize')
    do j = 1, 2
       do i = 1, 3
          l(i, j) = mod(i + j + rank, 2) == 0
       end do
    end do
    c4 = [(cmplx(rank, i, real32), i = 1, 5)]
    do j = 1, 3
       do i = 1, 2
          c8(i, j) = cmplx(rank + 0.5_real64 * i, -j, real64)
       end do
    end do
    allocate (lseg(rank + 1))
    lseg = .true.
    lseg(1) = .false.
    path = trim(dir) // '/chk_000001'
    call ckptio_create(path, MPI_COMM_WORLD, f)
    call ckptio_write(f, 'l', l, [0_int64, int(2 * rank, int64)], [3_int64, int(2 * nprocs, int64)])
    call ckptio_write(f, 'c4', c4, [int(5 * rank, int64)], [int(5 * nprocs, int64)])
    call ckptio_write(f, 'c8', c8, [0_int64, int(3 * rank, int64)], [2_int64, int(3 * nprocs, int64)])
    call ckptio_write_segment(f, 'lseg', lseg)
    call ckptio_set_attr(f, 'r4', 0.1_real32)
    call ckptio_close(f)

    other = nprocs - 1 - rank
    call ckptio_open(path, MPI_COMM_WORLD, f)
    call ckptio_inquire_var(f, 'l', dtype=dtype, shape=shp)
    call expect(dtype == CKPTIO_BOOL .and. all(shp == [3_int64, int(2 * nprocs, int64)]), 'inquire l')
    call ckptio_inquire_var(f, 'c4', dtype=dtype)
    call expect(dtype == CKPTIO_COMPLEX64, 'inquire c4')
    call ckptio_inquire_var(f, 'c8', dtype=dtype)
    call expect(dtype == CKPTIO_COMPLEX128, 'inquire c8')
    call ckptio_read(f, 'l', lback, offset=[0_int64, int(2 * other, int64)])
    do j = 1, 2
       do i = 1, 3
          call expect(lback(i, j) .eqv. (mod(i + j + other, 2) == 0), 'values of l')
       end do
    end do
    call ckptio_read(f, 'c4', c4back, offset=[int(5 * other, int64)])
    call expect(all(c4back == [(cmplx(other, i, real32), i = 1, 5)]), 'values of c4')
    call ckptio_read(f, 'c8', c8back, offset=[0_int64, int(3 * other, int64)])
    do j = 1, 3
       do i = 1, 2
          call expect(c8back(i, j) == cmplx(other + 0.5_real64 * i, -j, real64), 'values of c8')
       end do
    end do
    allocate (lall(nprocs * (nprocs + 1) / 2))
    call ckptio_read(f, 'lseg', lall)
    call expect(count(.not. lall) == nprocs .and. .not. lall(1), 'values of lseg')
    call ckptio_read(f, 'c4', c8back, offset=[0_int64, 0_int64], ierr=ierr)   ! wrong type: an error
    call expect(ierr == CKPTIO_ERR_ARGUMENT, 'complex64 variable read as complex128')
    call ckptio_get_attr(f, 'r4', r4)
    call ckptio_get_attr(f, 'r4', r8)
    call expect(r4 == 0.1_real32 .and. r8 == real(0.1_real32, real64), 'real32 attribute')
    call ckptio_close(f)
    if (rank == 0) print '(a,i0,a)', 'TYPES OK ', nprocs, ' ranks'
  end subroutine types

  ! ---- batched reads
  subroutine many()
    integer, parameter :: NV = 40, M = 3
    real(real64) :: r(M, NV), rback(M, NV), strided(2 * M)
    integer(int32) :: k(M, NV), kback(M, NV)
    type(ckptio_file) :: f
    type(ckptio_read_batch) :: batch
    integer :: v, i, other, ierr, nskipped
    character(len=16) :: name
    character(len=1024) :: path, found
    do v = 1, NV
       do i = 1, M
          r(i, v) = 1000.0_real64 * v + M * rank + i + 0.5_real64
          k(i, v) = 1000 * v + M * rank + i
       end do
    end do
    path = trim(dir) // '/chk_000001'
    call ckptio_create(path, MPI_COMM_WORLD, f)
    do v = 1, NV
       write (name, '(a,i3.3)') 'r', v
       call ckptio_write(f, trim(name), r(:, v), [int(M * rank, int64)], [int(M * nprocs, int64)])
       write (name, '(a,i3.3)') 'k', v
       call ckptio_write(f, trim(name), k(:, v), [int(M * rank, int64)], [int(M * nprocs, int64)])
    end do
    call ckptio_close(f)

    other = nprocs - 1 - rank
    rback = 0
    kback = 0
    call ckptio_open(path, MPI_COMM_WORLD, f)
    if (rank /= 0 .or. nprocs == 1) then
       do v = 1, NV
          write (name, '(a,i3.3)') 'r', v
          call ckptio_batch_add(batch, trim(name), rback(:, v), offset=[int(M * other, int64)])
          write (name, '(a,i3.3)') 'k', v
          call ckptio_batch_add(batch, trim(name), kback(:, v), offset=[int(M * other, int64)])
       end do
    end if
    call ckptio_read_many(f, batch)
    if (rank /= 0 .or. nprocs == 1) then
       do v = 1, NV
          do i = 1, M
             call expect(rback(i, v) == 1000.0_real64 * v + M * other + i + 0.5_real64, 'batched real64 value')
             call expect(kback(i, v) == 1000 * v + M * other + i, 'batched int32 value')
          end do
       end do
    end if
    ! a non-contiguous request on the last rank: ckptio_batch_add says so there, ckptio_read_many fails everywhere
    call ckptio_batch_add(batch, 'r001', rback(:, 1), ierr=ierr)
    call expect(ierr == CKPTIO_OK, 'batch add')
    if (rank == nprocs - 1) then
       call ckptio_batch_add(batch, 'r002', strided(1:2 * M:2), ierr=ierr)
       call expect(ierr == CKPTIO_ERR_ARGUMENT, 'non-contiguous batch request')
    end if
    call ckptio_read_many(f, batch, ierr=ierr)
    call report('read_many_noncontiguous', ierr)
    call ckptio_read_many(f, batch, ierr=ierr)          ! the batch was emptied: nothing to do, no error
    call expect(ierr == CKPTIO_OK, 'empty batch')
    call ckptio_close(f)
    nskipped = -1
    call ckptio_latest_verified(MPI_COMM_WORLD, dir, found, ierr=ierr, nskipped=nskipped)
    call expect(ierr == CKPTIO_OK .and. trim(found) == trim(path), 'latest_verified ' // trim(found))
    call expect(nskipped == 0, 'latest_verified skipped nothing')
    if (rank == 0) print '(a,i0,a)', 'MANY OK ', nprocs, ' ranks'
  end subroutine many

  ! ---- a series with retention, restart from the newest verified checkpoint
  subroutine should_exit()
    use, intrinsic :: iso_c_binding, only: c_int
    interface
       integer(c_int) function c_kill(pid, sig) bind(C, name="kill")
         import :: c_int
         integer(c_int), value :: pid, sig
       end function c_kill
       integer(c_int) function c_getpid() bind(C, name="getpid")
         import :: c_int
       end function c_getpid
    end interface
    integer(c_int), parameter :: SIGUSR1 = 10   ! Linux
    logical :: flag
    integer :: ierr
    call ckptio_should_exit(MPI_COMM_WORLD, flag, ierr=ierr)      ! the first call installs the handlers
    call expect(ierr == CKPTIO_OK .and. .not. flag, 'no reason to exit at the start')
    call ckptio_should_exit(MPI_COMM_WORLD%MPI_VAL, flag)
    call expect(.not. flag, 'still no reason to exit')
    if (rank == nprocs - 1) call expect(c_kill(c_getpid(), SIGUSR1) == 0, 'kill(getpid(), SIGUSR1)')
    call ckptio_should_exit(MPI_COMM_WORLD, flag)
    call expect(flag, 'SIGUSR1 on the last rank: exit on every rank')
    call ckptio_should_exit(MPI_COMM_WORLD%MPI_VAL, flag, ierr=ierr)
    call expect(ierr == CKPTIO_OK .and. flag, 'the decision stays')
    if (rank == 0) print '(a)', 'SHOULD_EXIT OK'
  end subroutine should_exit

  subroutine series()
    type(ckptio_file) :: f
    integer(int64) :: step, got
    real(real64) :: x(3), back(3)
    integer :: ierr
    character(len=1024) :: found
    do step = 1, 5
       x = real(step, real64) + rank
       call ckptio_series_create(MPI_COMM_WORLD, trim(dir) // '/run', step, 2, f, prefix='state')
       call ckptio_write(f, 'x', x, [int(3 * rank, int64)], [int(3 * nprocs, int64)])
       call ckptio_set_attr(f, 'step', step)
       call ckptio_close(f)
    end do
    call ckptio_series_create(MPI_COMM_WORLD, trim(dir) // '/run', 6_int64, 0, f, ierr=ierr)
    call report('series_keep_0', ierr)
    call ckptio_latest_verified(MPI_COMM_WORLD, trim(dir) // '/run', found, prefix='state')
    call ckptio_open(found, MPI_COMM_WORLD, f)
    call ckptio_get_attr(f, 'step', got)
    call ckptio_read(f, 'x', back, offset=[int(3 * rank, int64)])
    call ckptio_close(f)
    call expect(got == 5 .and. all(back == 5.0_real64 + rank), 'restart from the newest checkpoint')
    if (rank == 0) print '(a,a)', 'SERIES OK ', trim(found)
  end subroutine series

  subroutine series_bg()
    type(ckptio_file) :: f
    integer(int64) :: step
    real(real64) :: back(4)
    integer :: i
    character(len=1024) :: found, stage
    stage = trim(dir) // '/stage'
    do step = 1, 3
       if (step == 1) then
          call ckptio_series_create(MPI_COMM_WORLD, trim(dir) // '/run', step, 2, f, mode='async', &
               compression='zstd')
       else
          call ckptio_series_create(MPI_COMM_WORLD, trim(dir) // '/run', step, 2, f, stage_dir=trim(stage))
       end if
       call write_x(f, int(step), 0)
       call ckptio_close(f)
       call ckptio_wait(f)                    ! committed, the retention ran right after the commit
    end do
    call ckptio_latest_verified(MPI_COMM_WORLD, trim(dir) // '/run', found)
    call ckptio_open(trim(found), MPI_COMM_WORLD, f, stage_dir=trim(stage))   ! from the node-local stage
    call ckptio_read(f, 'x', back, offset=[int(4 * rank, int64)])
    call ckptio_close(f)
    call expect(all(back == [(300.0_real64 + 4 * rank + i, i = 0, 3)]), 'restart from the stage')
    if (rank == 0) print '(a,a)', 'SERIES_BG OK ', trim(found)
  end subroutine series_bg

  !> x(5, 3+rank): rank's columns of the global x(5, sum of 3+q), values using every mantissa bit
  real(real64) function ml_value(step, col, row)   ! 0-based global col (second index) and row (first index)
    integer, intent(in) :: step, col, row
    ml_value = (1000.0_real64 * step + 7.0_real64 * col + row) / 3.0_real64
  end function ml_value

  subroutine multilevel()
    type(ckptio_file) :: f
    character(len=1024) :: stage, scheme, phase, found
    real(real64), allocatable :: x(:,:), back(:,:)
    integer(int64) :: first, total, got
    integer :: step, i, j, ierr, leader
    character(len=16) :: group
    type(MPI_Comm) :: node
    call get_command_argument(3, stage)
    call get_command_argument(4, scheme)
    call get_command_argument(5, phase)
    first = 3_int64 * rank + rank * (rank - 1) / 2
    total = 3_int64 * nprocs + nprocs * (nprocs - 1) / 2
    allocate (x(5, 3 + rank), back(5, 3 + rank))
    if (trim(phase) == 'write') then
       call MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, node)
       leader = rank
       call MPI_Bcast(leader, 1, MPI_INTEGER, 0, node)   ! the node's lowest rank
       call MPI_Comm_free(node)
       write (group, '(a,i0)') 'rack', mod(leader, 2)
       if (rank == nprocs - 1) then
          call ckptio_series_create(MPI_COMM_WORLD, trim(dir), 1_int64, 2, f, prefix='bad', ierr=ierr, &
               stage_dir=trim(stage), redundancy='raid', drain_every=2)
       else
          call ckptio_series_create(MPI_COMM_WORLD, trim(dir), 1_int64, 2, f, prefix='bad', ierr=ierr, &
               stage_dir=trim(stage), redundancy=trim(scheme), drain_every=2)
       end if
       call report('ml_bad_scheme', ierr)
       do step = 1, 3
          x = reshape([((ml_value(step, int(first) + j, i), i = 0, 4), j = 0, 2 + rank)], [5, 3 + rank])
          call ckptio_series_create(MPI_COMM_WORLD, trim(dir), int(step, int64), 2, f, stage_dir=trim(stage), &
               redundancy=trim(scheme), drain_every=2, failure_group=trim(group))
          call ckptio_set_attr(f, 'step', step)
          call ckptio_write(f, 'x', x, [0_int64, first], [5_int64, total])
          call ckptio_close(f)
          call ckptio_wait(f)
       end do
       if (rank == 0) print '(a)', 'ML_WRITE OK'
    else
       call ckptio_latest_verified(MPI_COMM_WORLD, trim(dir), found, stage_dir=trim(stage))
       call expect(trim(found) == trim(dir) // '/chk_000003', 'latest from the node-local level: ' // trim(found))
       call ckptio_open(trim(found), MPI_COMM_WORLD, f)
       call ckptio_get_attr(f, 'step', got)
       call ckptio_read(f, 'x', back, offset=[0_int64, first])
       call ckptio_close(f)
       x = reshape([((ml_value(3, int(first) + j, i), i = 0, 4), j = 0, 2 + rank)], [5, 3 + rank])
       call expect(got == 3 .and. all(back == x), 'restart reads step 3 bit-identical')
       if (rank == 0) print '(a,a)', 'ML_RESTART OK ', trim(found)
    end if
  end subroutine multilevel

  ! ---- async, staged and compressed checkpoints (keyword options of ckptio_create), ckptio_wait/done/wait_all
  subroutine write_x(f, step, gextra)        ! x = 100*step + global 0-based index; gextra > 0: uncovered elements
    type(ckptio_file), intent(inout) :: f
    integer, intent(in) :: step, gextra
    real(real64) :: x(4)
    integer :: i
    x = [(100.0_real64 * step + 4 * rank + i, i = 0, 3)]
    call ckptio_write(f, 'x', x, [int(4 * rank, int64)], [int(4 * nprocs + gextra, int64)])
    x = -1.0_real64                          ! the checkpoint holds the values at the write (copied)
  end subroutine write_x

  subroutine check_x(path, step)
    character(len=*), intent(in) :: path
    integer, intent(in) :: step
    type(ckptio_file) :: f
    real(real64) :: back(4)
    integer :: i
    call ckptio_open(path, MPI_COMM_WORLD, f)
    call ckptio_read(f, 'x', back, offset=[int(4 * rank, int64)])
    call ckptio_close(f)
    call expect(all(back == [(100.0_real64 * step + 4 * rank + i, i = 0, 3)]), 'background checkpoint ' // path)
  end subroutine check_x

  subroutine background()
    type(ckptio_file) :: f, g
    integer :: ierr
    logical :: done
    real(real64) :: y(1)
    ! async: close returns once staged, wait commits
    call ckptio_create(trim(dir) // '/async_000001', MPI_COMM_WORLD, f, mode='async')
    call write_x(f, 1, 0)
    call ckptio_close(f)
    call ckptio_create(trim(dir) // '/other', MPI_COMM_WORLD, f, ierr=ierr)
    call report('create_on_pending', ierr)
    y = 0
    call ckptio_write(f, 'y', y, [0_int64], [1_int64], ierr=ierr)
    call report('write_after_close', ierr)
    call ckptio_done(f, done)
    call ckptio_wait(f)
    call check_x(trim(dir) // '/async_000001', 1)
    ! staged (sync mode, stage_dir): drained in the background
    call ckptio_create(trim(dir) // '/staged_000002', MPI_COMM_WORLD, f, stage_dir=trim(dir) // '/stage')
    call write_x(f, 2, 0)
    call ckptio_close(f)
    call ckptio_wait(f)
    call check_x(trim(dir) // '/staged_000002', 2)
    ! compression, async, backend given positionally
    call ckptio_create(trim(dir) // '/zstd_000003', MPI_COMM_WORLD, f, 'mpiio', mode='async', &
         compression='zstd+shuffle:3')
    call write_x(f, 3, 0)
    call ckptio_close(f)
    call ckptio_wait(f)
    call check_x(trim(dir) // '/zstd_000003', 3)
    call ckptio_create(trim(dir) // '/bad', MPI_COMM_WORLD, f, 'hdf5', compression='zstd', ierr=ierr)
    call ckptio_close(f, ierr=ierr)  ! a bad option is reported by the close, on every rank
    call report('compression_hdf5', ierr)
    ! background failures (an element nobody wrote): reported by ckptio_wait, ckptio_wait_all, ckptio_finalize
    call ckptio_create(trim(dir) // '/fail_000006', MPI_COMM_WORLD, f, mode='async')
    call write_x(f, 6, 1)
    call ckptio_close(f, ierr=ierr)
    call report('background_close', ierr)
    call ckptio_wait(f, ierr=ierr)
    call report('background_wait', ierr)
    call ckptio_create(trim(dir) // '/fail_000007', MPI_COMM_WORLD, f, mode='async')
    call write_x(f, 7, 1)
    call ckptio_close(f, ierr=ierr)
    call report('background_close7', ierr)
    call ckptio_wait_all(ierr=ierr)
    call report('background_wait_all', ierr)
    call ckptio_wait(f, ierr=ierr)           ! frees the handle (its failure again)
    call ckptio_create(trim(dir) // '/fail_000009', MPI_COMM_WORLD, g, mode='async')
    call write_x(g, 9, 1)
    call ckptio_close(g, ierr=ierr)
    call report('background_close9', ierr)
    if (rank == 0) print '(a,i0,a)', 'BACKGROUND OK ', nprocs, ' ranks'
    flush (6)
    call ckptio_finalize(ierr=ierr)          ! g was never waited for
    call report('finalize_unwaited', ierr)
  end subroutine background

  ! ---- communicator calls before MPI_Init and after MPI_Finalize: CKPTIO_ERR_INIT with ierr, no abort
  subroutine lifecycle_calls(when)
    character(len=*), intent(in) :: when
    type(ckptio_file) :: f
    integer :: ierr
    character(len=256) :: found
    call ckptio_create(trim(dir) // '/chk_000001', MPI_COMM_WORLD, f, ierr=ierr)
    call report('create_f08_' // when, ierr)
    call ckptio_create(trim(dir) // '/chk_000001', MPI_COMM_WORLD%MPI_VAL, f, ierr=ierr)
    call report('create_int_' // when, ierr)
    call ckptio_open(trim(dir) // '/chk_000001', MPI_COMM_WORLD, f, ierr=ierr)
    call report('open_' // when, ierr)
    call ckptio_latest(MPI_COMM_WORLD, dir, found, ierr=ierr)
    call report('latest_' // when, ierr)
    call ckptio_prune(MPI_COMM_WORLD, dir, 1, ierr=ierr)
    call report('prune_' // when, ierr)
    call ckptio_initialize(ierr=ierr)
    call report('initialize_' // when, ierr)
  end subroutine lifecycle_calls

  subroutine lifecycle()
    character(len=32) :: env
    integer :: ierr, length
    character(len=256) :: found
    ! MPI_Comm_rank is not allowed yet: the launcher's rank variable (Open MPI, then MPICH's Hydra / PMI)
    call get_environment_variable('OMPI_COMM_WORLD_RANK', env, length)
    if (length == 0) call get_environment_variable('PMI_RANK', env, length)
    rank = 0
    if (length > 0) read (env, *) rank
    call lifecycle_calls('before_init')
    call MPI_Init()
    call ckptio_latest(MPI_COMM_WORLD, dir, found, ierr=ierr)            ! works in between
    call expect(ierr == CKPTIO_OK, 'latest between MPI_Init and MPI_Finalize')
    call ckptio_finalize()
    call MPI_Finalize()
    call lifecycle_calls('after_finalize')
    if (rank == 0) print '(a)', 'LIFECYCLE OK'
  end subroutine lifecycle

  subroutine abort_without_ierr()
    type(ckptio_file) :: f
    call ckptio_open(trim(dir) // '/no_such_checkpoint', MPI_COMM_WORLD, f)
    print '(a)', 'NOT ABORTED'
  end subroutine abort_without_ierr

end program ckptio_test_f
