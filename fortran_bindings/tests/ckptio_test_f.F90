!> ckptio_test_f -- Fortran test program of module ckptio, run under mpirun by tests/test_bindings.py.
!>
!>   ckptio_test_f layout DIR    write DIR/chk_000003 from column-major arrays (type(MPI_Comm)) and
!>                               DIR/ints_000001 (classic integer communicator), read them back with another
!>                               decomposition, check; rank 0 prints "LAYOUT OK". Python then checks the
!>                               documented global shapes and values.
!>   ckptio_test_f errors DIR    provoke errors with ierr present; every rank prints
!>                               "ERR <case> <rank> <status> <message>"
!>   ckptio_test_f abort DIR     open a missing checkpoint WITHOUT ierr: must print the message and MPI_Abort
program ckptio_test_f
  use, intrinsic :: iso_fortran_env, only: int32, int64, real32, real64, error_unit
  use mpi_f08
  use ckptio
  implicit none
  integer, parameter :: N1 = 4, N2 = 3, NK = 2     ! a(N1, N2, NK) per rank, decomposed along the last axis
  integer :: rank, nprocs, nargs
  character(len=1024) :: mode, dir

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs)
  nargs = command_argument_count()
  if (nargs < 2) then
     if (rank == 0) write (error_unit, '(a)') 'usage: ckptio_test_f layout|errors|abort DIR'
     call MPI_Abort(MPI_COMM_WORLD, 2)
  end if
  call get_command_argument(1, mode)
  call get_command_argument(2, dir)
  select case (trim(mode))
  case ('layout')
     call layout()
  case ('errors')
     call errors()
  case ('abort')
     call abort_without_ierr()
  case default
     call MPI_Abort(MPI_COMM_WORLD, 2)
  end select
  call ckptio_finalize()
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
    integer :: i
    msg = ckptio_error_message()
    do i = 1, len(msg)
       if (msg(i:i) == new_line('a')) msg(i:i) = '|'
    end do
    if (ierr == CKPTIO_OK) msg = '-'
    print '(a,1x,a,1x,i0,1x,i0,1x,a)', 'ERR', name, rank, ierr, msg
    flush (6)
  end subroutine report

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
  end subroutine errors

  subroutine abort_without_ierr()
    type(ckptio_file) :: f
    call ckptio_open(trim(dir) // '/no_such_checkpoint', MPI_COMM_WORLD, f)
    print '(a)', 'NOT ABORTED'
  end subroutine abort_without_ierr

end program ckptio_test_f
