!> module ckptio -- Fortran interface of the ckptio checkpoint/restart library (on ISO_C_BINDING and ckptio.h).
!>
!> Conventions (see fortran_bindings/README.md):
!>  * Communicators: type(MPI_Comm) from mpi_f08 or a classic integer handle (generic interfaces).
!>  * Errors: every routine has an optional last argument ierr. Present: it receives CKPTIO_OK (0) or an error
!>    code and the program continues (ckptio_error_message() gives the full message). Absent: on failure the
!>    message is printed to stderr and MPI_Abort is called (like MPI's default error handler).
!>  * Arrays: real(real32), real(real64), integer(int32), integer(int64), complex(real32), complex(real64),
!>    logical (stored as 1-byte booleans), any rank (0..8), contiguous. A
!>    Fortran array a(n1,n2,n3) is stored as the C-order array of global shape (n3,n2,n1), so Python and C see
!>    a(i,j,k) as a[k-1,j-1,i-1] and no copy is made. Offsets and global shapes are given here in Fortran order
!>    (offset(1) belongs to the first index), as integer(int64), and offsets are 0-based (like HDF5's and
!>    MPI_Type_create_subarray's starts): offset = [i0, j0, k0] places a(1,1,1) at global index (i0, j0, k0).
!>  * Memory selections: ckptio_write/ckptio_read/ckptio_batch_add(..., interior_start=, interior_shape=) take
!>    the whole (guard-celled) array and the box of it that is the block (0-based start, Fortran order).
!>  * Per-variable metadata: ckptio_set_dims (Fortran order) and ckptio_set_var_attr, before the variable's write.
!>  * ckptio_write copies the array before it returns (temporaries, expressions and copy-in dummies are safe).
!>    ckptio_set_zero_copy(file, .true.) opts in to referencing it instead: then it must stay allocated and
!>    unchanged until ckptio_close returns (checked by checksum at close), like MPI's nonblocking buffers.
!>  * ckptio_create(..., mode='async') or stage_dir=: a background checkpoint. ckptio_close returns once the
!>    data is staged and keeps the handle; ckptio_wait(file) reports the background write's outcome (the same
!>    on every rank) and releases it. ckptio_wait_all and ckptio_finalize report failures never waited for.
!>  * Pass ierr by keyword (ierr=ierr): some generics have optional arguments before it.
!>  * Call ckptio_finalize() after the last ckptio call and before MPI_Finalize.
module ckptio
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: int32, int64, real32, real64, error_unit
  use mpi_f08, only: MPI_Comm, MPI_Abort, MPI_Comm_rank, MPI_COMM_WORLD, MPI_Initialized, MPI_Finalized
  implicit none
  private

  ! ---- status codes (enum ckptio_status in ckptio.h)
  integer, parameter, public :: CKPTIO_OK = 0, CKPTIO_ERR_DECLARATION = 1, CKPTIO_ERR_CORRUPT = 2, &
       CKPTIO_ERR_INCOMPLETE = 3, CKPTIO_ERR_FORMAT = 4, CKPTIO_ERR_NOT_FOUND = 5, CKPTIO_ERR_IO = 6, &
       CKPTIO_ERR_CAPABILITY = 7, CKPTIO_ERR_ARGUMENT = 8, CKPTIO_ERR_COLLECTIVE = 9, &
       CKPTIO_ERR_CHECKPOINT = 10, CKPTIO_ERR_PYTHON = 11, CKPTIO_ERR_INIT = 12
  ! ---- element types (enum ckptio_dtype), as returned by ckptio_inquire_var
  integer, parameter, public :: CKPTIO_DTYPE_OTHER = 0, CKPTIO_INT8 = 1, CKPTIO_INT16 = 2, CKPTIO_INT32 = 3, &
       CKPTIO_INT64 = 4, CKPTIO_UINT8 = 5, CKPTIO_UINT16 = 6, CKPTIO_UINT32 = 7, CKPTIO_UINT64 = 8, &
       CKPTIO_FLOAT32 = 9, CKPTIO_FLOAT64 = 10, CKPTIO_BOOL = 11, CKPTIO_COMPLEX64 = 12, CKPTIO_COMPLEX128 = 13
  integer, parameter, public :: CKPTIO_MAX_NDIM = 8
  integer(c_int), parameter :: ORDER_FORTRAN = 1

  !> An open checkpoint: from ckptio_create (being written) or ckptio_open (for reading).
  type, public :: ckptio_file
     private
     type(c_ptr) :: handle = c_null_ptr
     integer :: comm = -1            ! Fortran handle of the communicator, for MPI_Abort
     logical :: background = .false. ! created with mode="async" or a stage_dir: ckptio_close keeps the handle
     logical :: closed = .false.     ! background checkpoint closed, handle kept until ckptio_wait
  end type ckptio_file

  !> One request of a batched read (internal to ckptio_read_batch); bind(C): ckptio_read_request of ckptio.h.
  type, bind(C) :: c_read_request
     type(c_ptr) :: name = c_null_ptr
     integer(c_int) :: dtype = 0, ndim = 0
     type(c_ptr) :: offset = c_null_ptr, shape = c_null_ptr, buffer = c_null_ptr
  end type c_read_request
  !> A memory selection of a batched read (ckptio_memsel of ckptio.h): the whole array's shape, the box's start.
  type, bind(C) :: c_memsel
     type(c_ptr) :: mem_shape = c_null_ptr, mem_start = c_null_ptr
  end type c_memsel
  type :: read_item
     character(kind=c_char, len=:), allocatable :: name
     integer(c_int64_t) :: offset(CKPTIO_MAX_NDIM) = 0, shape(CKPTIO_MAX_NDIM) = 0
     integer(c_int64_t) :: mem_shape(CKPTIO_MAX_NDIM) = 0, mem_start(CKPTIO_MAX_NDIM) = 0
     logical :: selected = .false.      ! read into the box (mem_start, shape) of the array of mem_shape
     type(c_read_request) :: req
  end type read_item
  !> Requests collected with ckptio_batch_add and read together by ckptio_read_many (one collective exchange).
  !> The arrays added are only referenced: keep them allocated until ckptio_read_many returns.
  type, public :: ckptio_read_batch
     private
     type(read_item), allocatable :: items(:)
     integer :: n = 0
     character(len=300) :: problem = ' '
  end type ckptio_read_batch

  public :: ckptio_create, ckptio_open, ckptio_close, ckptio_write, ckptio_write_segment, ckptio_read, &
       ckptio_set_attr, ckptio_get_attr, ckptio_inquire_var, ckptio_latest, ckptio_prune, ckptio_finalize, &
       ckptio_strerror, ckptio_error_message, ckptio_set_zero_copy, ckptio_initialize, &
       ckptio_batch_add, ckptio_read_many, ckptio_latest_verified, ckptio_series_create, ckptio_wait, &
       ckptio_done, ckptio_wait_all, ckptio_set_dims, ckptio_set_var_attr, ckptio_should_exit

  !> ckptio_create(path, comm, file [, backend] [, mode=] [, stage_dir=] [, compression=] [, ierr=]) -- local;
  !> nothing is written before ckptio_close. mode="async" or a stage_dir: a background checkpoint (ckptio_wait).
  interface ckptio_create
     module procedure create_f08, create_int
  end interface ckptio_create
  !> ckptio_open(path, comm, file [, ierr]) -- collective.
  interface ckptio_open
     module procedure open_f08, open_int
  end interface ckptio_open
  !> ckptio_write(file, name, data, offset, global_shape [, ierr] [, interior_start=, interior_shape=]) -- local;
  !> Fortran-order offset/global_shape. With interior_start/interior_shape (0-based, Fortran order) the block is
  !> that box of data, e.g. the interior of a guard-celled array, written without packing it (memory selection).
  interface ckptio_write
     module procedure write_r4, write_r8, write_i4, write_i8, write_c4, write_c8, write_l
  end interface ckptio_write
  !> ckptio_write_segment(file, name, data [, ierr] [, rows]) -- local; this rank's variable-length piece of a 1-D
  !> variable (data of any rank is flattened in memory order); pieces are concatenated in rank order. With
  !> rows=.true. data keeps its shape and its LAST dimension is the rows laid end to end (the others must be the
  !> same on every rank): tracers(4, n) on each rank make a variable tracers(4, sum of n), Python's (sum of n, 4).
  interface ckptio_write_segment
     module procedure segment_r4, segment_r8, segment_i4, segment_i8, segment_c4, segment_c8, segment_l
  end interface ckptio_write_segment
  !> ckptio_read(file, name, data [, offset] [, ierr] [, interior_start=, interior_shape=]) -- collective; reads
  !> shape(data) elements at offset, or interior_shape elements into that box of data (the rest is untouched).
  interface ckptio_read
     module procedure read_r4, read_r8, read_i4, read_i8, read_c4, read_c8, read_l
  end interface ckptio_read
  !> ckptio_set_var_attr(file, name, key, value [, ierr]) -- local; an attribute of variable `name` (units,
  !> long_name, ...; integer, real32, real64, character), for its following writes: call it before the first.
  interface ckptio_set_var_attr
     module procedure set_var_attr_i4, set_var_attr_i8, set_var_attr_r4, set_var_attr_r8, set_var_attr_str
  end interface ckptio_set_var_attr
  !> ckptio_set_attr(file, key, value [, ierr]) -- local; integer (stored as int64), real(real32) and
  !> real(real64) (stored as float64), character.
  interface ckptio_set_attr
     module procedure set_attr_i4, set_attr_i8, set_attr_r4, set_attr_r8, set_attr_str
  end interface ckptio_set_attr
  !> ckptio_get_attr(file, key, value [, ierr]) -- local.
  interface ckptio_get_attr
     module procedure get_attr_i4, get_attr_i8, get_attr_r4, get_attr_r8, get_attr_str
  end interface ckptio_get_attr
  !> ckptio_latest([comm,] dir, path [, prefix] [, ierr]) -- newest complete checkpoint (blank if none);
  !> with comm collective (rank 0 looks, then broadcasts), without comm local.
  interface ckptio_latest
     module procedure latest_local, latest_f08, latest_int
  end interface ckptio_latest

  !> ckptio_batch_add(batch, name, data [, offset] [, ierr] [, interior_start=, interior_shape=]) -- local: add a
  !> read of shape(data) elements (or interior_shape elements into that box of data) of
  !> variable name at offset (default 0) into data; done by ckptio_read_many(file, batch [, ierr]).
  interface ckptio_batch_add
     module procedure batch_r4, batch_r8, batch_i4, batch_i8, batch_c4, batch_c8
  end interface ckptio_batch_add
  !> ckptio_series_create(comm, dir, step, keep, file [, prefix] [, backend] [, ierr] [, mode=] [, stage_dir=]
  !> [, compression=] [, redundancy=] [, drain_every=] [, failure_group=]) -- collective: start checkpoint
  !> dir/prefix_NNNNNN of a series (ckptio.Series); after its ckptio_close commits, only the newest keep complete
  !> checkpoints of the series are kept. Restart with ckptio_latest_verified. Multi-level (with a node-local
  !> stage_dir, as ckptio_series_create_ml in ckptio.h): redundancy='single'|'partner'|'xor', drain_every=k (only
  !> every k-th checkpoint of the series this process creates reaches dir), failure_group= (e.g. the rack);
  !> restart with ckptio_latest_verified(..., stage_dir=).
  interface ckptio_series_create
     module procedure series_f08, series_int
  end interface ckptio_series_create
  !> ckptio_latest_verified(comm, dir, path [, prefix] [, ierr] [, stage_dir=] [, nskipped=]) -- collective: the
  !> newest checkpoint whose checksums verify, falling back past corrupt or incomplete newer ones (as
  !> ckptio.Series.latest; a damaged one is marked and kept). With stage_dir= (a multi-level series): a newer
  !> checkpoint on the node-local level is verified, rebuilt from the other nodes' redundancy if a node lost it,
  !> and drained to dir first (ckptio_latest_verified_ex in ckptio.h). nskipped=: how many newer checkpoints were
  !> skipped as damaged or unreadable (a blank path with nskipped > 0: checkpoints exist but none is valid).
  interface ckptio_latest_verified
     module procedure latest_verified_f08, latest_verified_int
  end interface ckptio_latest_verified

  !> ckptio_prune(comm, dir, keep [, prefix] [, nremoved] [, ierr]) -- collective retention (ckptio.Series):
  !> delete all but the newest keep complete checkpoints named prefix_NNNNNN (prefix default "chk").
  interface ckptio_prune
     module procedure prune_f08, prune_int
  end interface ckptio_prune

  !> ckptio_should_exit(comm, flag [, ierr]) -- collective, one small allreduce: flag is .true. on every rank when
  !> the batch job should write its final checkpoint and leave (a warning signal on any rank, or too little wall
  !> time left); see ckptio_should_exit in ckptio.h and docs/guide/batch.md. Call it once early (installs the
  !> signal handlers), then every step.
  interface ckptio_should_exit
     module procedure should_exit_f08, should_exit_int
  end interface ckptio_should_exit

  ! ---- POSIX: a pause before MPI_Abort (see finish)
  interface
     integer(c_int) function c_usleep(usec) bind(C, name="usleep")
       import :: c_int
       integer(c_int), value :: usec
     end function c_usleep
  end interface

  ! ---- the C API (ckptio.h)
  interface
     integer(c_int) function c_create(path, comm, backend, mode, stage_dir, compression, file) &
          bind(C, name="ckptio_create_f")
       import :: c_int, c_char, c_ptr
       character(kind=c_char), intent(in) :: path(*), backend(*), mode(*), stage_dir(*), compression(*)
       integer(c_int), value :: comm
       type(c_ptr), intent(out) :: file
     end function c_create
     integer(c_int) function c_wait(file) bind(C, name="ckptio_wait")
       import :: c_int, c_ptr
       type(c_ptr), value :: file
     end function c_wait
     integer(c_int) function c_done(file, flag) bind(C, name="ckptio_done")
       import :: c_int, c_ptr
       type(c_ptr), value :: file
       integer(c_int), intent(out) :: flag
     end function c_done
     integer(c_int) function c_wait_all() bind(C, name="ckptio_wait_all")
       import :: c_int
     end function c_wait_all
     integer(c_int) function c_open(path, comm, stage_dir, problem, file) bind(C, name="ckptio_open_f")
       import :: c_int, c_char, c_ptr
       character(kind=c_char), intent(in) :: path(*), stage_dir(*), problem(*)
       integer(c_int), value :: comm
       type(c_ptr), intent(inout) :: file
     end function c_open
     integer(c_int) function c_close(file) bind(C, name="ckptio_close")
       import :: c_int, c_ptr
       type(c_ptr), value :: file
     end function c_close
     integer(c_int) function c_write(file, name, dtype, ndim, global_shape, offset, local_shape, data, segment, &
          force_copy, problem, mem_shape, mem_start) bind(C, name="ckptio_write_f")
       import :: c_int, c_char, c_ptr, c_int64_t
       type(c_ptr), value :: file, data
       character(kind=c_char), intent(in) :: name(*), problem(*)
       integer(c_int), value :: dtype, ndim, segment, force_copy
       integer(c_int64_t), intent(in) :: global_shape(*), offset(*), local_shape(*)
       integer(c_int64_t), intent(in), optional :: mem_shape(*), mem_start(*)   ! absent: NULL (no selection)
     end function c_write
     integer(c_int) function c_read(file, name, dtype, ndim, offset, shape, buffer, problem, mem_shape, mem_start) &
          bind(C, name="ckptio_read_f")
       import :: c_int, c_char, c_ptr, c_int64_t
       type(c_ptr), value :: file, buffer
       character(kind=c_char), intent(in) :: name(*), problem(*)
       integer(c_int), value :: dtype, ndim
       integer(c_int64_t), intent(in) :: offset(*), shape(*)
       integer(c_int64_t), intent(in), optional :: mem_shape(*), mem_start(*)
     end function c_read
     integer(c_int) function c_read_many(file, n, requests, selections, problem) bind(C, name="ckptio_read_many_f")
       import :: c_int, c_char, c_ptr, c_read_request, c_memsel
       type(c_ptr), value :: file
       integer(c_int), value :: n
       type(c_read_request), intent(in) :: requests(*)
       type(c_memsel), intent(in) :: selections(*)
       character(kind=c_char), intent(in) :: problem(*)
     end function c_read_many
     integer(c_int) function c_series_create(comm, dir, prefix, keep, step, backend, mode, stage_dir, compression, &
          redundancy, drain_every, failure_group, problem, file) bind(C, name="ckptio_series_create_ml_f")
       import :: c_int, c_char, c_ptr, c_int64_t
       integer(c_int), value :: comm, keep, drain_every
       character(kind=c_char), intent(in) :: dir(*), prefix(*), backend(*), mode(*), stage_dir(*), compression(*), &
            redundancy(*), failure_group(*), problem(*)
       integer(c_int64_t), value :: step
       type(c_ptr), intent(inout) :: file
     end function c_series_create
     integer(c_int) function c_latest_verified(comm, dir, prefix, stage_dir, buf, buflen, nskipped) &
          bind(C, name="ckptio_latest_verified_n_f")
       import :: c_int, c_char, c_size_t
       integer(c_int), value :: comm
       character(kind=c_char), intent(in) :: dir(*), prefix(*), stage_dir(*)
       character(kind=c_char), intent(out) :: buf(*)
       integer(c_size_t), value :: buflen
       integer(c_int), intent(out) :: nskipped
     end function c_latest_verified
     integer(c_int) function c_set_zero_copy(file, enable) bind(C, name="ckptio_set_zero_copy")
       import :: c_int, c_ptr
       type(c_ptr), value :: file
       integer(c_int), value :: enable
     end function c_set_zero_copy
     integer(c_int) function c_initialize() bind(C, name="ckptio_initialize")
       import :: c_int
     end function c_initialize
     integer(c_int) function c_set_error(status, message) bind(C, name="ckptio_set_error_f")
       import :: c_int, c_char
       integer(c_int), value :: status
       character(kind=c_char), intent(in) :: message(*)
     end function c_set_error
     integer(c_int) function c_set_attr_int64(file, key, value) bind(C, name="ckptio_set_attr_int64")
       import :: c_int, c_char, c_ptr, c_int64_t
       type(c_ptr), value :: file
       character(kind=c_char), intent(in) :: key(*)
       integer(c_int64_t), value :: value
     end function c_set_attr_int64
     integer(c_int) function c_set_attr_double(file, key, value) bind(C, name="ckptio_set_attr_double")
       import :: c_int, c_char, c_ptr, c_double
       type(c_ptr), value :: file
       character(kind=c_char), intent(in) :: key(*)
       real(c_double), value :: value
     end function c_set_attr_double
     integer(c_int) function c_set_var_attr_int64(file, name, key, value) bind(C, name="ckptio_set_var_attr_int64")
       import :: c_int, c_char, c_ptr, c_int64_t
       type(c_ptr), value :: file
       character(kind=c_char), intent(in) :: name(*), key(*)
       integer(c_int64_t), value :: value
     end function c_set_var_attr_int64
     integer(c_int) function c_set_var_attr_double(file, name, key, value) bind(C, name="ckptio_set_var_attr_double")
       import :: c_int, c_char, c_ptr, c_double
       type(c_ptr), value :: file
       character(kind=c_char), intent(in) :: name(*), key(*)
       real(c_double), value :: value
     end function c_set_var_attr_double
     integer(c_int) function c_set_var_attr_string(file, name, key, value) bind(C, name="ckptio_set_var_attr_string")
       import :: c_int, c_char, c_ptr
       type(c_ptr), value :: file
       character(kind=c_char), intent(in) :: name(*), key(*), value(*)
     end function c_set_var_attr_string
     integer(c_int) function c_set_dims(file, name, ndim, joined) bind(C, name="ckptio_set_dims_f")
       import :: c_int, c_char, c_ptr
       type(c_ptr), value :: file
       character(kind=c_char), intent(in) :: name(*), joined(*)
       integer(c_int), value :: ndim
     end function c_set_dims
     integer(c_int) function c_set_attr_string(file, key, value) bind(C, name="ckptio_set_attr_string")
       import :: c_int, c_char, c_ptr
       type(c_ptr), value :: file
       character(kind=c_char), intent(in) :: key(*), value(*)
     end function c_set_attr_string
     integer(c_int) function c_get_attr_int64(file, key, value) bind(C, name="ckptio_get_attr_int64")
       import :: c_int, c_char, c_ptr, c_int64_t
       type(c_ptr), value :: file
       character(kind=c_char), intent(in) :: key(*)
       integer(c_int64_t), intent(out) :: value
     end function c_get_attr_int64
     integer(c_int) function c_get_attr_double(file, key, value) bind(C, name="ckptio_get_attr_double")
       import :: c_int, c_char, c_ptr, c_double
       type(c_ptr), value :: file
       character(kind=c_char), intent(in) :: key(*)
       real(c_double), intent(out) :: value
     end function c_get_attr_double
     integer(c_int) function c_get_attr_string(file, key, buf, buflen) bind(C, name="ckptio_get_attr_string")
       import :: c_int, c_char, c_ptr, c_size_t
       type(c_ptr), value :: file
       character(kind=c_char), intent(in) :: key(*)
       character(kind=c_char), intent(out) :: buf(*)
       integer(c_size_t), value :: buflen
     end function c_get_attr_string
     integer(c_int) function c_inquire_var(file, name, order, dtype, ndim, shape) &
          bind(C, name="ckptio_inquire_var_order")
       import :: c_int, c_char, c_ptr, c_int64_t
       type(c_ptr), value :: file
       character(kind=c_char), intent(in) :: name(*)
       integer(c_int), value :: order
       integer(c_int), intent(out) :: dtype, ndim
       integer(c_int64_t), intent(out) :: shape(*)
     end function c_inquire_var
     integer(c_int) function c_latest(dir, prefix, buf, buflen) bind(C, name="ckptio_latest_f")
       import :: c_int, c_char, c_size_t
       character(kind=c_char), intent(in) :: dir(*), prefix(*)
       character(kind=c_char), intent(out) :: buf(*)
       integer(c_size_t), value :: buflen
     end function c_latest
     integer(c_int) function c_latest_comm(comm, dir, prefix, buf, buflen) bind(C, name="ckptio_latest_comm_f")
       import :: c_int, c_char, c_size_t
       integer(c_int), value :: comm
       character(kind=c_char), intent(in) :: dir(*), prefix(*)
       character(kind=c_char), intent(out) :: buf(*)
       integer(c_size_t), value :: buflen
     end function c_latest_comm
     integer(c_int) function c_prune(comm, dir, prefix, keep, nremoved) bind(C, name="ckptio_prune_f")
       import :: c_int, c_char
       integer(c_int), value :: comm, keep
       character(kind=c_char), intent(in) :: dir(*), prefix(*)
       integer(c_int), intent(out) :: nremoved
     end function c_prune
     integer(c_int) function c_should_exit(comm, flag) bind(C, name="ckptio_should_exit_f")
       import :: c_int
       integer(c_int), value :: comm
       integer(c_int), intent(out) :: flag
     end function c_should_exit
     integer(c_int) function c_last_error(buf, buflen) bind(C, name="ckptio_last_error")
       import :: c_int, c_char, c_size_t
       character(kind=c_char), intent(out) :: buf(*)
       integer(c_size_t), value :: buflen
     end function c_last_error
     type(c_ptr) function c_strerror(status) bind(C, name="ckptio_strerror")
       import :: c_int, c_ptr
       integer(c_int), value :: status
     end function c_strerror
     integer(c_int) function c_finalize() bind(C, name="ckptio_finalize")
       import :: c_int
     end function c_finalize
     integer(c_size_t) function c_strlen(s) bind(C, name="strlen")
       import :: c_size_t, c_ptr
       type(c_ptr), value :: s
     end function c_strlen
  end interface

contains

  ! =================================================================================================== helpers

  !> Fortran string -> NUL-terminated C string (trailing blanks removed).
  pure function cstr(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=len_trim(s) + 1) :: c
    c = trim(s) // c_null_char
  end function cstr

  !> C characters up to the first NUL -> Fortran string value (blank padded), .false. if it does not fit.
  subroutine from_c(buf, value)
    character(kind=c_char), intent(in) :: buf(:)
    character(len=*), intent(out) :: value
    integer :: i
    value = ' '
    do i = 1, min(size(buf), len(value))
       if (buf(i) == c_null_char) exit
       value(i:i) = buf(i)
    end do
  end subroutine from_c

  !> Hand a status to the caller (ierr present) or, on failure, print the message and abort (ierr absent).
  subroutine finish(status, comm, ierr)
    integer(c_int), intent(in) :: status
    integer, intent(in) :: comm
    integer, intent(out), optional :: ierr
    type(MPI_Comm) :: c
    integer :: rank
    logical :: up, down
    if (present(ierr)) then
       ierr = int(status)
       return
    end if
    if (status == CKPTIO_OK) return
    call MPI_Initialized(up)
    call MPI_Finalized(down)
    if (.not. up .or. down) then                      ! no MPI_Abort possible: stop this process
       write (error_unit, '(a,i0,a,a)') 'ckptio: error ', status, ', stopping: ', ckptio_error_message()
       flush (error_unit)
       error stop 'ckptio: error without ierr while MPI is not initialized'
    end if
    call MPI_Comm_rank(MPI_COMM_WORLD, rank)
    write (error_unit, '(a,i0,a,i0,a,a)') 'ckptio: rank ', rank, ': error ', status, ', aborting: ', &
         ckptio_error_message()
    flush (error_unit)
    ! The message is in the pipe to the launcher now, but MPI_Abort makes the launcher kill the job, and MPICH's
    ! Hydra can end before it forwarded what the ranks wrote last (seen under load: the job ended with no message at
    ! all). Every failing rank reaches this line (errors are agreed between ranks), so a short pause costs nothing
    ! but lets the launcher forward every rank's message first.
    if (c_usleep(500000_c_int) /= 0) continue
    c%MPI_VAL = comm
    if (comm == -1) c = MPI_COMM_WORLD
    call MPI_Abort(c, int(status))
  end subroutine finish

  !> Status of a handle that is not open (recorded as the last error).
  integer(c_int) function not_open(where)
    character(len=*), intent(in) :: where
    not_open = c_set_error(int(CKPTIO_ERR_ARGUMENT, c_int), cstr(where // ': the ckptio_file is not open'))
  end function not_open

  ! ====================================================================================== create / open / close

  !> Status of a handle that is still open where a new one is to be made (create/open): an error, so that a
  !> pending checkpoint is never dropped silently.
  integer(c_int) function still_open(where, file)
    character(len=*), intent(in) :: where
    type(ckptio_file), intent(in) :: file
    still_open = c_set_error(int(CKPTIO_ERR_ARGUMENT, c_int), cstr(where // ': ' // open_problem(file)))
  end function still_open

  !> Why a handle that is still associated cannot be reused (create/open/series_create).
  function open_problem(file) result(text)
    type(ckptio_file), intent(in) :: file
    character(len=:), allocatable :: text
    if (file%closed) then
       text = 'the ckptio_file still holds a background checkpoint; call ckptio_wait on it first (it was left ' // &
            'unchanged)'
    else
       text = 'the ckptio_file still holds an open checkpoint; call ckptio_close on it first (it was left open ' // &
            'and unchanged)'
    end if
  end function open_problem

  !> The value of an optional character argument, or default.
  function opt(value, default) result(text)
    character(len=*), intent(in), optional :: value
    character(len=*), intent(in) :: default
    character(len=:), allocatable :: text
    text = default
    if (present(value)) text = trim(value)
  end function opt

  subroutine create_int(path, comm, file, backend, ierr, mode, stage_dir, compression)
    character(len=*), intent(in) :: path
    integer, intent(in) :: comm                       !< classic (use mpi) communicator handle
    type(ckptio_file), intent(inout) :: file          !< must not hold an open checkpoint
    character(len=*), intent(in), optional :: backend !< "mpiio" (default), "hdf5" or "pnetcdf"
    integer, intent(out), optional :: ierr
    character(len=*), intent(in), optional :: mode        !< "sync" (default) or "async"
    character(len=*), intent(in), optional :: stage_dir   !< fast tier written first, drained in the background
    character(len=*), intent(in), optional :: compression !< "zstd" or "zstd+shuffle" [":LEVEL"] (mpiio only)
    integer(c_int) :: st
    if (c_associated(file%handle)) then
       st = still_open('ckptio_create("' // trim(path) // '")', file)
       call finish(st, file%comm, ierr)
       return
    end if
    st = c_create(cstr(path), int(comm, c_int), cstr(opt(backend, 'mpiio')), cstr(opt(mode, '')), &
         cstr(opt(stage_dir, '')), cstr(opt(compression, '')), file%handle)
    if (st == CKPTIO_OK) then
       file%comm = comm
       file%background = opt(mode, '') == 'async' .or. len_trim(opt(stage_dir, '')) > 0
       file%closed = .false.
    end if
    call finish(st, comm, ierr)
  end subroutine create_int

  subroutine create_f08(path, comm, file, backend, ierr, mode, stage_dir, compression)
    character(len=*), intent(in) :: path
    type(MPI_Comm), intent(in) :: comm
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in), optional :: backend
    integer, intent(out), optional :: ierr
    character(len=*), intent(in), optional :: mode, stage_dir, compression
    call create_int(path, comm%MPI_VAL, file, backend, ierr, mode, stage_dir, compression)
  end subroutine create_f08

  !> Collective. A handle that is still open on some rank fails the open on every rank (and stays open).
  !> stage_dir: the one the checkpoint was written with: read from the node-local stages when they are usable.
  subroutine open_int(path, comm, file, ierr, stage_dir)
    character(len=*), intent(in) :: path
    integer, intent(in) :: comm
    type(ckptio_file), intent(inout) :: file
    integer, intent(out), optional :: ierr
    character(len=*), intent(in), optional :: stage_dir
    integer(c_int) :: st
    if (c_associated(file%handle)) then
       st = c_open(cstr(path), int(comm, c_int), cstr(opt(stage_dir, '')), cstr(open_problem(file)), file%handle)
       call finish(st, file%comm, ierr)
       return
    end if
    st = c_open(cstr(path), int(comm, c_int), cstr(opt(stage_dir, '')), cstr(''), file%handle)
    if (st == CKPTIO_OK) file%comm = comm
    call finish(st, comm, ierr)
  end subroutine open_int

  subroutine open_f08(path, comm, file, ierr, stage_dir)
    character(len=*), intent(in) :: path
    type(MPI_Comm), intent(in) :: comm
    type(ckptio_file), intent(inout) :: file
    integer, intent(out), optional :: ierr
    character(len=*), intent(in), optional :: stage_dir
    call open_int(path, comm%MPI_VAL, file, ierr, stage_dir)
  end subroutine open_f08

  !> Collective: commit a checkpoint being written (atomically, on every rank or none), or close one opened
  !> for reading. The file is closed afterwards in every case -- except a background checkpoint (mode="async"
  !> or a stage_dir): close returns once the data is staged, and the handle is kept (also on failure) until
  !> ckptio_wait, which reports the background write's outcome.
  subroutine ckptio_close(file, ierr)
    type(ckptio_file), intent(inout) :: file
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_close')
    else
       st = c_close(file%handle)
       if (file%background) then             ! kept by the C side too (a second close is refused there)
          file%closed = .true.
          call finish(st, file%comm, ierr)
          return
       end if
    end if
    file%handle = c_null_ptr
    file%background = .false.
    file%closed = .false.
    call finish(st, file%comm, ierr)
  end subroutine ckptio_close

  !> Local: block until the background checkpoint closed by ckptio_close is committed, and release the handle.
  !> A failure of the background write is reported here, with the same code and message on every rank.
  subroutine ckptio_wait(file, ierr)
    type(ckptio_file), intent(inout) :: file
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_wait')
    else
       st = c_wait(file%handle)
       if (file%closed) then                 ! (otherwise the C side refused it and the handle stays valid)
          file%handle = c_null_ptr
          file%background = .false.
          file%closed = .false.
       end if
    end if
    call finish(st, file%comm, ierr)
  end subroutine ckptio_wait

  !> Local: done = .true. when nothing of the closed background checkpoint is still being written (then
  !> ckptio_wait does not block). The handle stays valid.
  subroutine ckptio_done(file, done, ierr)
    type(ckptio_file), intent(inout) :: file
    logical, intent(out) :: done
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, flag
    done = .false.
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_done')
    else
       st = c_done(file%handle, flag)
       if (st == CKPTIO_OK) done = flag /= 0
    end if
    call finish(st, file%comm, ierr)
  end subroutine ckptio_done

  !> Local: wait for every background checkpoint of this process; report the first failure that no ckptio_wait
  !> reported. ckptio_finalize does this too, before it finalizes the interpreter.
  subroutine ckptio_wait_all(ierr)
    integer, intent(out), optional :: ierr
    call finish(c_wait_all(), -1, ierr)
  end subroutine ckptio_wait_all

  !> Local: zero-copy mode of a checkpoint being written (default .false.: every write copies the array).
  !> With .true., the following writes only reference the arrays, which must then stay allocated and unchanged
  !> until ckptio_close returns -- no expressions, array sections or dummies that the compiler may copy in.
  !> Each block is checksummed at write and verified at close: a changed one fails the close on every rank.
  subroutine ckptio_set_zero_copy(file, enable, ierr)
    type(ckptio_file), intent(inout) :: file
    logical, intent(in) :: enable
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_set_zero_copy')
    else
       st = c_set_zero_copy(file%handle, merge(1_c_int, 0_c_int, enable))
    end if
    call finish(st, file%comm, ierr)
  end subroutine ckptio_set_zero_copy

  ! ================================================================================================== writing

  !> Local: block (segment .false.) or segment write through ckptio_write_f; force_copy for a temporary made
  !> here (logical arrays), which must be copied even in zero-copy mode.
  subroutine write_any(file, fname, name, ptr, dtype, lshape, contiguous, offset, global_shape, segment, &
       force_copy, ierr, interior_start, interior_shape, rows)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: fname, name
    type(c_ptr), intent(in) :: ptr
    integer, intent(in) :: dtype
    integer(int64), intent(in) :: lshape(:), offset(:), global_shape(:)
    logical, intent(in) :: contiguous, segment, force_copy
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    logical, intent(in), optional :: rows   ! a segment keeps the array's shape (rows: its last dimension)
    integer(c_int) :: st
    integer(int64) :: n(1)
    logical :: keep_shape
    character(len=200) :: problem
    problem = ' '
    if (.not. contiguous) then
       problem = 'the array is not contiguous (pass the whole contiguous array with interior_start= and ' // &
            'interior_shape=, or copy it into one)'
    else if (.not. segment .and. (size(offset) /= size(lshape) .or. size(global_shape) /= size(lshape))) then
       write (problem, '(a,i0,a,i0,a,i0)') 'the array has rank ', size(lshape), ' but offset has ', &
            size(offset), ' elements and global_shape ', size(global_shape)
    else
       problem = interior_problem(size(lshape), interior_start, interior_shape)
    end if
    n(1) = product(lshape)
    keep_shape = .false.
    if (present(rows)) keep_shape = rows
    if (.not. c_associated(file%handle)) then
       st = not_open(fname // '("' // trim(name) // '")')
    else if (segment .and. keep_shape) then
       st = c_write(file%handle, cstr(name), int(dtype, c_int), int(size(lshape), c_int), lshape, lshape, lshape, &
            ptr, 2_c_int, merge(1_c_int, 0_c_int, force_copy), cstr(problem))
    else if (segment) then
       st = c_write(file%handle, cstr(name), int(dtype, c_int), 1_c_int, n, n, n, ptr, 1_c_int, &
            merge(1_c_int, 0_c_int, force_copy), cstr(problem))
    else if (present(interior_shape) .and. problem == ' ') then   ! memory selection: the box of the array
       st = c_write(file%handle, cstr(name), int(dtype, c_int), int(size(lshape), c_int), global_shape, offset, &
            interior_shape, ptr, 0_c_int, merge(1_c_int, 0_c_int, force_copy), cstr(problem), lshape, interior_start)
    else
       st = c_write(file%handle, cstr(name), int(dtype, c_int), int(size(lshape), c_int), global_shape, offset, &
            lshape, ptr, 0_c_int, merge(1_c_int, 0_c_int, force_copy), cstr(problem))
    end if
    call finish(st, file%comm, ierr)
  end subroutine write_any

  !> Why interior_start/interior_shape (0-based start and shape of a box of an array of rank `rank`, Fortran
  !> order) cannot be used, or blank. The bounds themselves are checked by the C side (against the array).
  function interior_problem(rank, interior_start, interior_shape) result(problem)
    integer, intent(in) :: rank
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    character(len=200) :: problem
    problem = ' '
    if (present(interior_start) .neqv. present(interior_shape)) then
       problem = 'give both interior_start= and interior_shape=, or neither'
    else if (present(interior_shape)) then
       if (size(interior_start) /= rank .or. size(interior_shape) /= rank) &
            write (problem, '(a,i0,a,i0,a,i0)') 'the array has rank ', rank, ' but interior_start has ', &
            size(interior_start), ' elements and interior_shape ', size(interior_shape)
    end if
  end function interior_problem

  !> Collective read into ptr (shp elements, Fortran order) at offset (default 0).
  subroutine read_any(file, name, ptr, dtype, shp, contiguous, offset, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    type(c_ptr), intent(in) :: ptr
    integer, intent(in) :: dtype
    integer(int64), intent(in) :: shp(:)
    logical, intent(in) :: contiguous
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    integer(c_int) :: st
    integer(int64) :: off(max(size(shp), 1))
    character(len=200) :: problem
    problem = ' '
    off = 0
    if (.not. contiguous) then
       problem = 'the array to read into is not contiguous'
    else if (present(offset)) then
       if (size(offset) /= size(shp)) then
          write (problem, '(a,i0,a,i0,a)') 'the array has rank ', size(shp), ' but offset has ', size(offset), &
               ' elements'
       else
          off(1:size(shp)) = offset
       end if
    end if
    if (problem == ' ') problem = interior_problem(size(shp), interior_start, interior_shape)
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_read("' // trim(name) // '")')
    else if (present(interior_shape) .and. problem == ' ') then   ! memory selection: into the box of the array
       st = c_read(file%handle, cstr(name), int(dtype, c_int), int(size(shp), c_int), off, interior_shape, ptr, &
            cstr(problem), shp, interior_start)
    else
       st = c_read(file%handle, cstr(name), int(dtype, c_int), int(size(shp), c_int), off, shp, ptr, cstr(problem))
    end if
    call finish(st, file%comm, ierr)
  end subroutine read_any

  ! ---- type-specific wrappers of the generics ckptio_write, ckptio_write_segment, ckptio_read

  subroutine write_r4(file, name, data, offset, global_shape, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    real(real32), dimension(..), intent(in), target :: data
    integer(int64), intent(in) :: offset(:), global_shape(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call write_any(file, 'ckptio_write', name, c_loc(data), CKPTIO_FLOAT32, shape(data, int64), is_contiguous(data), &
         offset, global_shape, .false., .false., ierr, &
         interior_start, interior_shape)
  end subroutine write_r4

  subroutine segment_r4(file, name, data, ierr, rows)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    real(real32), dimension(..), intent(in), target :: data
    integer, intent(out), optional :: ierr
    logical, intent(in), optional :: rows
    call write_any(file, 'ckptio_write_segment', name, c_loc(data), CKPTIO_FLOAT32, shape(data, int64), &
         is_contiguous(data), [0_int64], [0_int64], .true., .false., ierr, rows=rows)
  end subroutine segment_r4

  subroutine read_r4(file, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    real(real32), dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call read_any(file, name, c_loc(data), CKPTIO_FLOAT32, shape(data, int64), is_contiguous(data), offset, ierr, &
         interior_start, interior_shape)
  end subroutine read_r4

  subroutine write_r8(file, name, data, offset, global_shape, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    real(real64), dimension(..), intent(in), target :: data
    integer(int64), intent(in) :: offset(:), global_shape(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call write_any(file, 'ckptio_write', name, c_loc(data), CKPTIO_FLOAT64, shape(data, int64), is_contiguous(data), &
         offset, global_shape, .false., .false., ierr, &
         interior_start, interior_shape)
  end subroutine write_r8

  subroutine segment_r8(file, name, data, ierr, rows)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    real(real64), dimension(..), intent(in), target :: data
    integer, intent(out), optional :: ierr
    logical, intent(in), optional :: rows
    call write_any(file, 'ckptio_write_segment', name, c_loc(data), CKPTIO_FLOAT64, shape(data, int64), &
         is_contiguous(data), [0_int64], [0_int64], .true., .false., ierr, rows=rows)
  end subroutine segment_r8

  subroutine read_r8(file, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    real(real64), dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call read_any(file, name, c_loc(data), CKPTIO_FLOAT64, shape(data, int64), is_contiguous(data), offset, ierr, &
         interior_start, interior_shape)
  end subroutine read_r8

  subroutine write_i4(file, name, data, offset, global_shape, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    integer(int32), dimension(..), intent(in), target :: data
    integer(int64), intent(in) :: offset(:), global_shape(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call write_any(file, 'ckptio_write', name, c_loc(data), CKPTIO_INT32, shape(data, int64), is_contiguous(data), &
         offset, global_shape, .false., .false., ierr, &
         interior_start, interior_shape)
  end subroutine write_i4

  subroutine segment_i4(file, name, data, ierr, rows)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    integer(int32), dimension(..), intent(in), target :: data
    integer, intent(out), optional :: ierr
    logical, intent(in), optional :: rows
    call write_any(file, 'ckptio_write_segment', name, c_loc(data), CKPTIO_INT32, shape(data, int64), &
         is_contiguous(data), [0_int64], [0_int64], .true., .false., ierr, rows=rows)
  end subroutine segment_i4

  subroutine read_i4(file, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    integer(int32), dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call read_any(file, name, c_loc(data), CKPTIO_INT32, shape(data, int64), is_contiguous(data), offset, ierr, &
         interior_start, interior_shape)
  end subroutine read_i4

  subroutine write_i8(file, name, data, offset, global_shape, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    integer(int64), dimension(..), intent(in), target :: data
    integer(int64), intent(in) :: offset(:), global_shape(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call write_any(file, 'ckptio_write', name, c_loc(data), CKPTIO_INT64, shape(data, int64), is_contiguous(data), &
         offset, global_shape, .false., .false., ierr, &
         interior_start, interior_shape)
  end subroutine write_i8

  subroutine segment_i8(file, name, data, ierr, rows)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    integer(int64), dimension(..), intent(in), target :: data
    integer, intent(out), optional :: ierr
    logical, intent(in), optional :: rows
    call write_any(file, 'ckptio_write_segment', name, c_loc(data), CKPTIO_INT64, shape(data, int64), &
         is_contiguous(data), [0_int64], [0_int64], .true., .false., ierr, rows=rows)
  end subroutine segment_i8

  subroutine read_i8(file, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    integer(int64), dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call read_any(file, name, c_loc(data), CKPTIO_INT64, shape(data, int64), is_contiguous(data), offset, ierr, &
         interior_start, interior_shape)
  end subroutine read_i8

  subroutine write_c4(file, name, data, offset, global_shape, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    complex(real32), dimension(..), intent(in), target :: data
    integer(int64), intent(in) :: offset(:), global_shape(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call write_any(file, 'ckptio_write', name, c_loc(data), CKPTIO_COMPLEX64, shape(data, int64), is_contiguous(data), &
         offset, global_shape, .false., .false., ierr, &
         interior_start, interior_shape)
  end subroutine write_c4

  subroutine segment_c4(file, name, data, ierr, rows)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    complex(real32), dimension(..), intent(in), target :: data
    integer, intent(out), optional :: ierr
    logical, intent(in), optional :: rows
    call write_any(file, 'ckptio_write_segment', name, c_loc(data), CKPTIO_COMPLEX64, shape(data, int64), &
         is_contiguous(data), [0_int64], [0_int64], .true., .false., ierr, rows=rows)
  end subroutine segment_c4

  subroutine read_c4(file, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    complex(real32), dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call read_any(file, name, c_loc(data), CKPTIO_COMPLEX64, shape(data, int64), is_contiguous(data), offset, ierr, &
         interior_start, interior_shape)
  end subroutine read_c4

  subroutine write_c8(file, name, data, offset, global_shape, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    complex(real64), dimension(..), intent(in), target :: data
    integer(int64), intent(in) :: offset(:), global_shape(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call write_any(file, 'ckptio_write', name, c_loc(data), CKPTIO_COMPLEX128, shape(data, int64), is_contiguous(data), &
         offset, global_shape, .false., .false., ierr, &
         interior_start, interior_shape)
  end subroutine write_c8

  subroutine segment_c8(file, name, data, ierr, rows)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    complex(real64), dimension(..), intent(in), target :: data
    integer, intent(out), optional :: ierr
    logical, intent(in), optional :: rows
    call write_any(file, 'ckptio_write_segment', name, c_loc(data), CKPTIO_COMPLEX128, shape(data, int64), &
         is_contiguous(data), [0_int64], [0_int64], .true., .false., ierr, rows=rows)
  end subroutine segment_c8

  subroutine read_c8(file, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    complex(real64), dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call read_any(file, name, c_loc(data), CKPTIO_COMPLEX128, shape(data, int64), is_contiguous(data), offset, ierr, &
         interior_start, interior_shape)
  end subroutine read_c8

  !> Default logical arrays are stored as 1-byte booleans (numpy bool): converted through a logical(c_bool)
  !> copy, which is always copied again by the C side (also in zero-copy mode) since it is freed on return.
  subroutine write_l(file, name, data, offset, global_shape, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    logical, dimension(..), intent(in), target :: data
    integer(int64), intent(in) :: offset(:), global_shape(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    logical(c_bool), allocatable, target :: tmp(:)
    call to_c_bool(data, tmp)
    call write_any(file, 'ckptio_write', name, c_loc(tmp), CKPTIO_BOOL, shape(data, int64), is_contiguous(data), &
         offset, global_shape, .false., .true., ierr, &
         interior_start, interior_shape)
  end subroutine write_l

  subroutine segment_l(file, name, data, ierr, rows)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    logical, dimension(..), intent(in), target :: data
    integer, intent(out), optional :: ierr
    logical, intent(in), optional :: rows
    logical(c_bool), allocatable, target :: tmp(:)
    call to_c_bool(data, tmp)
    call write_any(file, 'ckptio_write_segment', name, c_loc(tmp), CKPTIO_BOOL, shape(data, int64), &
         is_contiguous(data), [0_int64], [0_int64], .true., .true., ierr, rows=rows)
  end subroutine segment_l

  subroutine read_l(file, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name
    logical, dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    logical(c_bool), allocatable, target :: tmp(:)
    logical, pointer :: flat(:)
    integer :: st
    call to_c_bool(data, tmp)   ! the current values: a read into an interior leaves the others as they are
    if (size(tmp) /= size(data)) then
       deallocate (tmp)
       allocate (tmp(size(data)))
    end if
    call read_any(file, name, c_loc(tmp), CKPTIO_BOOL, shape(data, int64), is_contiguous(data), offset, st, &
         interior_start, interior_shape)
    if (st == CKPTIO_OK) then
       call c_f_pointer(c_loc(data), flat, [size(data)])
       flat = logical(tmp)
    end if
    call finish(int(st, c_int), file%comm, ierr)
  end subroutine read_l

  !> The elements of a contiguous logical array as logical(c_bool) (empty if not contiguous: write_any then
  !> reports it).
  subroutine to_c_bool(data, tmp)
    logical, dimension(..), intent(in), target :: data
    logical(c_bool), allocatable, intent(out) :: tmp(:)
    logical, pointer :: flat(:)
    if (is_contiguous(data)) then
       call c_f_pointer(c_loc(data), flat, [size(data)])
       tmp = logical(flat, c_bool)
    else
       allocate (tmp(0))
    end if
  end subroutine to_c_bool

  ! ================================================================================================== reading

  !> Local: element type (CKPTIO_FLOAT64, ...) and global shape in Fortran order (size(shape) = rank) of a
  !> variable of an opened checkpoint. A per-rank segment variable has rank 1 and its total length.
  subroutine ckptio_inquire_var(file, name, dtype, shape, ierr)
    type(ckptio_file), intent(in) :: file
    character(len=*), intent(in) :: name
    integer, intent(out), optional :: dtype
    integer(int64), allocatable, intent(out), optional :: shape(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, cdtype, ndim
    integer(c_int64_t) :: cshape(CKPTIO_MAX_NDIM)
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_inquire_var("' // trim(name) // '")')
    else
       st = c_inquire_var(file%handle, cstr(name), ORDER_FORTRAN, cdtype, ndim, cshape)
       if (st == CKPTIO_OK) then
          if (present(dtype)) dtype = int(cdtype)
          if (present(shape)) shape = int(cshape(1:ndim), int64)
       end if
    end if
    call finish(st, file%comm, ierr)
  end subroutine ckptio_inquire_var

  ! =============================================================================================== attributes

  subroutine set_attr_i8(file, key, value, ierr)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: key
    integer(int64), intent(in) :: value
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_set_attr("' // trim(key) // '")')
    else
       st = c_set_attr_int64(file%handle, cstr(key), int(value, c_int64_t))
    end if
    call finish(st, file%comm, ierr)
  end subroutine set_attr_i8

  subroutine set_attr_i4(file, key, value, ierr)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: key
    integer(int32), intent(in) :: value
    integer, intent(out), optional :: ierr
    call set_attr_i8(file, key, int(value, int64), ierr)
  end subroutine set_attr_i4

  subroutine set_attr_r8(file, key, value, ierr)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: key
    real(real64), intent(in) :: value
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_set_attr("' // trim(key) // '")')
    else
       st = c_set_attr_double(file%handle, cstr(key), real(value, c_double))
    end if
    call finish(st, file%comm, ierr)
  end subroutine set_attr_r8

  !> A real(real32) attribute, stored as float64 (its exact value: real(value, real64)).
  subroutine set_attr_r4(file, key, value, ierr)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: key
    real(real32), intent(in) :: value
    integer, intent(out), optional :: ierr
    call set_attr_r8(file, key, real(value, real64), ierr)
  end subroutine set_attr_r4

  !> A string attribute; trailing blanks of value are removed.
  subroutine set_attr_str(file, key, value, ierr)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: key, value
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_set_attr("' // trim(key) // '")')
    else
       st = c_set_attr_string(file%handle, cstr(key), cstr(value))
    end if
    call finish(st, file%comm, ierr)
  end subroutine set_attr_str

  ! ---- per-variable metadata (Python's write(..., dims=, attrs=)); before the variable's first ckptio_write

  !> Local: the dimension names of variable `name`, one per axis in Fortran order (dims(1) belongs to the first
  !> index; stored reversed, like shapes: Python sees them as reader.variables[name].dims in C order), for this
  !> rank's following writes of `name` -- call it before the first. Trailing blanks are removed.
  subroutine ckptio_set_dims(file, name, dims, ierr)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name, dims(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    character(len=:), allocatable :: joined
    integer :: i
    joined = ''
    do i = 1, size(dims)
       joined = joined // trim(dims(i)) // c_null_char
    end do
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_set_dims("' // trim(name) // '")')
    else
       st = c_set_dims(file%handle, cstr(name), int(size(dims), c_int), joined // c_null_char)
    end if
    call finish(st, file%comm, ierr)
  end subroutine ckptio_set_dims

  subroutine set_var_attr_i8(file, name, key, value, ierr)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name, key
    integer(int64), intent(in) :: value
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_set_var_attr("' // trim(name) // '")')
    else
       st = c_set_var_attr_int64(file%handle, cstr(name), cstr(key), int(value, c_int64_t))
    end if
    call finish(st, file%comm, ierr)
  end subroutine set_var_attr_i8

  subroutine set_var_attr_i4(file, name, key, value, ierr)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name, key
    integer(int32), intent(in) :: value
    integer, intent(out), optional :: ierr
    call set_var_attr_i8(file, name, key, int(value, int64), ierr)
  end subroutine set_var_attr_i4

  subroutine set_var_attr_r8(file, name, key, value, ierr)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name, key
    real(real64), intent(in) :: value
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_set_var_attr("' // trim(name) // '")')
    else
       st = c_set_var_attr_double(file%handle, cstr(name), cstr(key), real(value, c_double))
    end if
    call finish(st, file%comm, ierr)
  end subroutine set_var_attr_r8

  subroutine set_var_attr_r4(file, name, key, value, ierr)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name, key
    real(real32), intent(in) :: value
    integer, intent(out), optional :: ierr
    call set_var_attr_r8(file, name, key, real(value, real64), ierr)
  end subroutine set_var_attr_r4

  !> A string attribute of a variable; trailing blanks of value are removed.
  subroutine set_var_attr_str(file, name, key, value, ierr)
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in) :: name, key, value
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_set_var_attr("' // trim(name) // '")')
    else
       st = c_set_var_attr_string(file%handle, cstr(name), cstr(key), cstr(value))
    end if
    call finish(st, file%comm, ierr)
  end subroutine set_var_attr_str

  subroutine get_attr_i8(file, key, value, ierr)
    type(ckptio_file), intent(in) :: file
    character(len=*), intent(in) :: key
    integer(int64), intent(out) :: value
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    integer(c_int64_t) :: v
    value = 0
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_get_attr("' // trim(key) // '")')
    else
       st = c_get_attr_int64(file%handle, cstr(key), v)
       if (st == CKPTIO_OK) value = int(v, int64)
    end if
    call finish(st, file%comm, ierr)
  end subroutine get_attr_i8

  subroutine get_attr_i4(file, key, value, ierr)
    type(ckptio_file), intent(in) :: file
    character(len=*), intent(in) :: key
    integer(int32), intent(out) :: value
    integer, intent(out), optional :: ierr
    integer(int64) :: v
    integer :: st
    character(len=100) :: msg
    value = 0
    call get_attr_i8(file, key, v, st)
    if (st == CKPTIO_OK) then
       if (v < -huge(value) - 1_int64 .or. v > huge(value)) then
          write (msg, '(a,i0,a)') '") = ', v, ' does not fit in integer(int32)'
          st = c_set_error(int(CKPTIO_ERR_ARGUMENT, c_int), cstr('ckptio_get_attr("' // trim(key) // trim(msg)))
       else
          value = int(v, int32)
       end if
    end if
    call finish(int(st, c_int), file%comm, ierr)
  end subroutine get_attr_i4

  subroutine get_attr_r8(file, key, value, ierr)
    type(ckptio_file), intent(in) :: file
    character(len=*), intent(in) :: key
    real(real64), intent(out) :: value
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    real(c_double) :: v
    value = 0
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_get_attr("' // trim(key) // '")')
    else
       st = c_get_attr_double(file%handle, cstr(key), v)
       if (st == CKPTIO_OK) value = real(v, real64)
    end if
    call finish(st, file%comm, ierr)
  end subroutine get_attr_r8

  !> A real attribute as real(real32) (rounded to nearest; CKPTIO_ERR_ARGUMENT if out of real32's range).
  subroutine get_attr_r4(file, key, value, ierr)
    type(ckptio_file), intent(in) :: file
    character(len=*), intent(in) :: key
    real(real32), intent(out) :: value
    integer, intent(out), optional :: ierr
    real(real64) :: v
    integer :: st
    value = 0
    call get_attr_r8(file, key, v, st)
    if (st == CKPTIO_OK) then
       if (abs(v) > huge(value)) then
          st = c_set_error(int(CKPTIO_ERR_ARGUMENT, c_int), cstr('ckptio_get_attr("' // trim(key) // &
               '"): the value does not fit in real(real32)'))
       else
          value = real(v, real32)
       end if
    end if
    call finish(int(st, c_int), file%comm, ierr)
  end subroutine get_attr_r4

  !> A string attribute, blank padded; CKPTIO_ERR_ARGUMENT if it is longer than len(value).
  subroutine get_attr_str(file, key, value, ierr)
    type(ckptio_file), intent(in) :: file
    character(len=*), intent(in) :: key
    character(len=*), intent(out) :: value
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    character(kind=c_char) :: buf(len(value) + 1)
    value = ' '
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_get_attr("' // trim(key) // '")')
    else
       st = c_get_attr_string(file%handle, cstr(key), buf, size(buf, kind=c_size_t))
       if (st == CKPTIO_OK) call from_c(buf, value)
    end if
    call finish(st, file%comm, ierr)
  end subroutine get_attr_str

  ! ================================================================================================== latest

  subroutine latest_local(dir, path, prefix, ierr)
    character(len=*), intent(in) :: dir
    character(len=*), intent(out) :: path              !< blank when there is no complete checkpoint
    character(len=*), intent(in), optional :: prefix   !< default "chk"
    integer, intent(out), optional :: ierr
    call latest_impl(-1, .false., dir, path, prefix, ierr)
  end subroutine latest_local

  subroutine latest_int(comm, dir, path, prefix, ierr)
    integer, intent(in) :: comm
    character(len=*), intent(in) :: dir
    character(len=*), intent(out) :: path
    character(len=*), intent(in), optional :: prefix
    integer, intent(out), optional :: ierr
    call latest_impl(comm, .true., dir, path, prefix, ierr)
  end subroutine latest_int

  subroutine latest_f08(comm, dir, path, prefix, ierr)
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: dir
    character(len=*), intent(out) :: path
    character(len=*), intent(in), optional :: prefix
    integer, intent(out), optional :: ierr
    call latest_impl(comm%MPI_VAL, .true., dir, path, prefix, ierr)
  end subroutine latest_f08

  subroutine latest_impl(comm, collective, dir, path, prefix, ierr)
    integer, intent(in) :: comm
    logical, intent(in) :: collective
    character(len=*), intent(in) :: dir
    character(len=*), intent(out) :: path
    character(len=*), intent(in), optional :: prefix
    integer, intent(out), optional :: ierr
    character(kind=c_char) :: buf(len(path) + 1)
    character(len=:), allocatable :: pre
    integer(c_int) :: st
    pre = 'chk'
    if (present(prefix)) pre = prefix
    path = ' '
    if (collective) then
       st = c_latest_comm(int(comm, c_int), cstr(dir), cstr(pre), buf, size(buf, kind=c_size_t))
    else
       st = c_latest(cstr(dir), cstr(pre), buf, size(buf, kind=c_size_t))
    end if
    if (st == CKPTIO_OK) call from_c(buf, path)
    call finish(st, comm, ierr)
  end subroutine latest_impl

  ! ============================================================================================ batched reads

  !> Local: record one request (the batch references data, which must stay allocated until ckptio_read_many).
  !> A problem (non-contiguous array, wrong number of offsets, too many dimensions) is kept for
  !> ckptio_read_many, which then fails on every rank.
  subroutine batch_any(batch, name, ptr, dtype, shp, contiguous, offset, ierr, interior_start, interior_shape)
    type(ckptio_read_batch), intent(inout) :: batch
    character(len=*), intent(in) :: name
    type(c_ptr), intent(in) :: ptr
    integer, intent(in) :: dtype
    integer(int64), intent(in) :: shp(:)
    logical, intent(in) :: contiguous
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    type(read_item), allocatable :: grown(:)
    character(len=300) :: problem
    integer :: nd
    problem = ' '
    nd = size(shp)
    if (.not. contiguous) then
       problem = 'the array to read "' // trim(name) // '" into is not contiguous'
    else if (present(offset)) then
       if (size(offset) /= nd) write (problem, '(a,i0,a,i0,a)') 'read of "' // trim(name) // '": the array has rank ', &
            nd, ' but offset has ', size(offset), ' elements'
    end if
    if (problem == ' ') then
       problem = interior_problem(nd, interior_start, interior_shape)
       if (problem /= ' ') problem = 'read of "' // trim(name) // '": ' // trim(problem)
    end if
    if (problem /= ' ') then
       if (batch%problem == ' ') batch%problem = problem
       call finish(c_set_error(int(CKPTIO_ERR_ARGUMENT, c_int), cstr('ckptio_batch_add("' // trim(name) // '"): ' &
            // trim(problem))), -1, ierr)
       return
    end if
    if (.not. allocated(batch%items)) allocate (batch%items(16))
    if (batch%n == size(batch%items)) then
       allocate (grown(2 * size(batch%items)))
       grown(1:batch%n) = batch%items(1:batch%n)
       call move_alloc(grown, batch%items)
    end if
    batch%n = batch%n + 1
    associate (it => batch%items(batch%n))
      it%name = cstr(name)
      it%shape = 0
      it%offset = 0
      it%shape(1:nd) = shp
      if (present(offset)) it%offset(1:nd) = offset
      it%selected = present(interior_shape)
      if (it%selected) then       ! the box (bounds checked by the C side, on every rank together)
         it%mem_shape(1:nd) = shp
         it%shape(1:nd) = interior_shape
         it%mem_start(1:nd) = interior_start
      end if
      it%req%dtype = int(dtype, c_int)
      it%req%ndim = int(nd, c_int)
      it%req%buffer = ptr
    end associate
    if (present(ierr)) ierr = CKPTIO_OK
  end subroutine batch_any

  !> Collective: perform every request of batch in one two-phase exchange (the number of requests may differ
  !> between ranks); the batch is empty afterwards. A problem with any request on any rank fails every rank.
  subroutine ckptio_read_many(file, batch, ierr)
    type(ckptio_file), intent(inout) :: file
    type(ckptio_read_batch), intent(inout), target :: batch
    integer, intent(out), optional :: ierr
    type(c_read_request), allocatable :: reqs(:)
    type(c_memsel), allocatable :: sels(:)
    integer(c_int) :: st
    integer :: i
    allocate (reqs(max(batch%n, 1)), sels(max(batch%n, 1)))
    do i = 1, batch%n   ! addresses taken now: the items array no longer grows
       batch%items(i)%req%name = c_loc(batch%items(i)%name)
       batch%items(i)%req%offset = c_loc(batch%items(i)%offset)
       batch%items(i)%req%shape = c_loc(batch%items(i)%shape)
       reqs(i) = batch%items(i)%req
       if (batch%items(i)%selected) then
          sels(i)%mem_shape = c_loc(batch%items(i)%mem_shape)
          sels(i)%mem_start = c_loc(batch%items(i)%mem_start)
       end if
    end do
    if (.not. c_associated(file%handle)) then
       st = not_open('ckptio_read_many')
    else
       st = c_read_many(file%handle, int(batch%n, c_int), reqs, sels, cstr(batch%problem))
    end if
    batch%n = 0
    batch%problem = ' '
    call finish(st, file%comm, ierr)
  end subroutine ckptio_read_many

  subroutine batch_r4(batch, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_read_batch), intent(inout) :: batch
    character(len=*), intent(in) :: name
    real(real32), dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call batch_any(batch, name, c_loc(data), CKPTIO_FLOAT32, shape(data, int64), is_contiguous(data), offset, ierr, &
         interior_start, interior_shape)
  end subroutine batch_r4

  subroutine batch_r8(batch, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_read_batch), intent(inout) :: batch
    character(len=*), intent(in) :: name
    real(real64), dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call batch_any(batch, name, c_loc(data), CKPTIO_FLOAT64, shape(data, int64), is_contiguous(data), offset, ierr, &
         interior_start, interior_shape)
  end subroutine batch_r8

  subroutine batch_i4(batch, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_read_batch), intent(inout) :: batch
    character(len=*), intent(in) :: name
    integer(int32), dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call batch_any(batch, name, c_loc(data), CKPTIO_INT32, shape(data, int64), is_contiguous(data), offset, ierr, &
         interior_start, interior_shape)
  end subroutine batch_i4

  subroutine batch_i8(batch, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_read_batch), intent(inout) :: batch
    character(len=*), intent(in) :: name
    integer(int64), dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call batch_any(batch, name, c_loc(data), CKPTIO_INT64, shape(data, int64), is_contiguous(data), offset, ierr, &
         interior_start, interior_shape)
  end subroutine batch_i8

  subroutine batch_c4(batch, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_read_batch), intent(inout) :: batch
    character(len=*), intent(in) :: name
    complex(real32), dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call batch_any(batch, name, c_loc(data), CKPTIO_COMPLEX64, shape(data, int64), is_contiguous(data), offset, ierr, &
         interior_start, interior_shape)
  end subroutine batch_c4

  subroutine batch_c8(batch, name, data, offset, ierr, interior_start, interior_shape)
    type(ckptio_read_batch), intent(inout) :: batch
    character(len=*), intent(in) :: name
    complex(real64), dimension(..), intent(inout), target :: data
    integer(int64), intent(in), optional :: offset(:)
    integer, intent(out), optional :: ierr
    integer(int64), intent(in), optional :: interior_start(:), interior_shape(:)
    call batch_any(batch, name, c_loc(data), CKPTIO_COMPLEX128, shape(data, int64), is_contiguous(data), offset, ierr, &
         interior_start, interior_shape)
  end subroutine batch_c8

  subroutine series_int(comm, dir, step, keep, file, prefix, backend, ierr, mode, stage_dir, compression, &
       redundancy, drain_every, failure_group)
    integer, intent(in) :: comm
    character(len=*), intent(in) :: dir
    integer(int64), intent(in) :: step
    integer, intent(in) :: keep
    type(ckptio_file), intent(inout) :: file           !< must not hold an open checkpoint
    character(len=*), intent(in), optional :: prefix   !< default "chk"
    character(len=*), intent(in), optional :: backend  !< default "mpiio"
    integer, intent(out), optional :: ierr
    character(len=*), intent(in), optional :: mode, stage_dir, compression  !< as for ckptio_create
    character(len=*), intent(in), optional :: redundancy     !< 'single', 'partner' or 'xor' (needs stage_dir)
    integer, intent(in), optional :: drain_every             !< default 1: every checkpoint reaches dir
    character(len=*), intent(in), optional :: failure_group  !< this node's group, e.g. its rack
    character(len=:), allocatable :: pre, be
    integer(c_int) :: st, every
    pre = 'chk'
    be = 'mpiio'
    every = 1
    if (present(prefix)) pre = prefix
    if (present(backend)) be = backend
    if (present(drain_every)) every = int(drain_every, c_int)
    ! collective: a rank whose handle is still open takes part with that problem, so all fail together (and its
    ! handle stays open and unchanged)
    if (c_associated(file%handle)) then
       st = c_series_create(int(comm, c_int), cstr(dir), cstr(pre), int(keep, c_int), int(step, c_int64_t), &
            cstr(be), cstr(opt(mode, '')), cstr(opt(stage_dir, '')), cstr(opt(compression, '')), &
            cstr(opt(redundancy, '')), every, cstr(opt(failure_group, '')), cstr(open_problem(file)), file%handle)
       call finish(st, file%comm, ierr)
       return
    end if
    st = c_series_create(int(comm, c_int), cstr(dir), cstr(pre), int(keep, c_int), int(step, c_int64_t), cstr(be), &
         cstr(opt(mode, '')), cstr(opt(stage_dir, '')), cstr(opt(compression, '')), cstr(opt(redundancy, '')), every, &
         cstr(opt(failure_group, '')), cstr(''), file%handle)
    if (st == CKPTIO_OK) then
       file%comm = comm
       file%background = opt(mode, '') == 'async' .or. len_trim(opt(stage_dir, '')) > 0
       file%closed = .false.
    end if
    call finish(st, comm, ierr)
  end subroutine series_int

  subroutine series_f08(comm, dir, step, keep, file, prefix, backend, ierr, mode, stage_dir, compression, &
       redundancy, drain_every, failure_group)
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: dir
    integer(int64), intent(in) :: step
    integer, intent(in) :: keep
    type(ckptio_file), intent(inout) :: file
    character(len=*), intent(in), optional :: prefix, backend
    integer, intent(out), optional :: ierr
    character(len=*), intent(in), optional :: mode, stage_dir, compression, redundancy, failure_group
    integer, intent(in), optional :: drain_every
    call series_int(comm%MPI_VAL, dir, step, keep, file, prefix, backend, ierr, mode, stage_dir, compression, &
         redundancy, drain_every, failure_group)
  end subroutine series_f08

  subroutine latest_verified_int(comm, dir, path, prefix, ierr, stage_dir, nskipped)
    integer, intent(in) :: comm
    character(len=*), intent(in) :: dir
    character(len=*), intent(out) :: path              !< blank when no checkpoint verifies
    character(len=*), intent(in), optional :: prefix   !< default "chk"
    integer, intent(out), optional :: ierr
    character(len=*), intent(in), optional :: stage_dir  !< a multi-level series' node-local stage
    integer, intent(out), optional :: nskipped         !< newer checkpoints skipped as damaged or unreadable
    character(kind=c_char) :: buf(len(path) + 1)
    integer(c_int) :: st, n
    path = ' '
    n = 0
    st = c_latest_verified(int(comm, c_int), cstr(dir), cstr(opt(prefix, 'chk')), cstr(opt(stage_dir, '')), buf, &
         size(buf, kind=c_size_t), n)
    if (st == CKPTIO_OK) call from_c(buf, path)
    if (present(nskipped)) nskipped = int(n)
    call finish(st, comm, ierr)
  end subroutine latest_verified_int

  subroutine latest_verified_f08(comm, dir, path, prefix, ierr, stage_dir, nskipped)
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: dir
    character(len=*), intent(out) :: path
    character(len=*), intent(in), optional :: prefix, stage_dir
    integer, intent(out), optional :: ierr, nskipped
    call latest_verified_int(comm%MPI_VAL, dir, path, prefix, ierr, stage_dir, nskipped)
  end subroutine latest_verified_f08

  subroutine prune_int(comm, dir, keep, prefix, nremoved, ierr)
    integer, intent(in) :: comm
    character(len=*), intent(in) :: dir
    integer, intent(in) :: keep
    character(len=*), intent(in), optional :: prefix
    integer, intent(out), optional :: nremoved
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, n
    n = 0
    if (present(prefix)) then
       st = c_prune(int(comm, c_int), cstr(dir), cstr(prefix), int(keep, c_int), n)
    else
       st = c_prune(int(comm, c_int), cstr(dir), cstr('chk'), int(keep, c_int), n)
    end if
    if (present(nremoved)) nremoved = int(n)
    call finish(st, comm, ierr)
  end subroutine prune_int

  subroutine prune_f08(comm, dir, keep, prefix, nremoved, ierr)
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: dir
    integer, intent(in) :: keep
    character(len=*), intent(in), optional :: prefix
    integer, intent(out), optional :: nremoved
    integer, intent(out), optional :: ierr
    call prune_int(comm%MPI_VAL, dir, keep, prefix, nremoved, ierr)
  end subroutine prune_f08

  subroutine should_exit_int(comm, flag, ierr)
    integer, intent(in) :: comm
    logical, intent(out) :: flag
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, f
    f = 0
    st = c_should_exit(int(comm, c_int), f)
    flag = (st == 0 .and. f /= 0)
    call finish(st, comm, ierr)
  end subroutine should_exit_int

  subroutine should_exit_f08(comm, flag, ierr)
    type(MPI_Comm), intent(in) :: comm
    logical, intent(out) :: flag
    integer, intent(out), optional :: ierr
    call should_exit_int(comm%MPI_VAL, flag, ierr)
  end subroutine should_exit_f08

  ! ======================================================================================= errors, finalize

  !> The full message of the most recent failed ckptio call on this thread (empty if none failed).
  function ckptio_error_message() result(msg)
    character(len=:), allocatable :: msg
    character(kind=c_char) :: buf(16384)
    character(len=16384) :: tmp
    integer(c_int) :: st
    st = c_last_error(buf, size(buf, kind=c_size_t))
    call from_c(buf, tmp)
    msg = trim(tmp)
  end function ckptio_error_message

  !> Short description of a status code.
  function ckptio_strerror(status) result(msg)
    integer, intent(in) :: status
    character(len=:), allocatable :: msg
    type(c_ptr) :: p
    character(kind=c_char), pointer :: chars(:)
    integer :: i
    p = c_strerror(int(status, c_int))
    call c_f_pointer(p, chars, [c_strlen(p)])
    allocate (character(len=size(chars)) :: msg)
    do i = 1, size(chars)
       msg(i:i) = chars(i)
    end do
  end function ckptio_strerror

  !> Optional: start the embedded interpreter and import ckptio now (otherwise the first call does it), e.g. to
  !> time it separately or to see a startup problem early. Local; MPI must be initialized.
  subroutine ckptio_initialize(ierr)
    integer, intent(out), optional :: ierr
    call finish(c_initialize(), -1, ierr)
  end subroutine ckptio_initialize

  !> Release ckptio's Python state (and finalize the interpreter it started). Call after the last ckptio call
  !> (all files closed) and before MPI_Finalize.
  subroutine ckptio_finalize(ierr)
    integer, intent(out), optional :: ierr
    call finish(c_finalize(), -1, ierr)
  end subroutine ckptio_finalize

end module ckptio
