/*
 * ckptio.h -- C interface of ckptio, the checkpoint/restart library for MPI codes.
 *
 * The library embeds the CPython interpreter (or reuses the running one when the host program is Python) and
 * calls the Python package `ckptio` with copies (default) or zero-copy views of the caller's arrays. See
 * fortran_bindings/README.md.
 *
 * Conventions
 * -----------
 *  - Every function returns a status code (enum ckptio_status): CKPTIO_OK (0) on success. On failure,
 *    ckptio_last_error() gives the full message (variable, rank(s), cause) and ckptio_strerror() a short text.
 *  - "collective" functions must be called by every rank of the communicator, in the same order; when they
 *    fail, they fail on every rank with the same status and message. "local" functions involve no
 *    communication; an error is reported on the calling rank only (a failed ckptio_write also makes the
 *    following ckptio_close fail on every rank, so no rank is left waiting).
 *  - MPI must be initialized before the first call. Call ckptio_finalize() before MPI_Finalize().
 *  - Shapes and offsets are int64_t arrays of length ndim; offsets are 0-based.
 *  - Array order. With CKPTIO_ORDER_C (the plain functions) shapes and offsets are given in C order (slowest
 *    varying axis first) and stored as given. With CKPTIO_ORDER_FORTRAN (the *_order functions) they are given
 *    in Fortran order (fastest axis first): a column-major array a(n1,n2,n3) is stored as the C-order
 *    (row-major) array of global shape (n3,n2,n1), offsets reversed likewise -- the convention of the HDF5 and
 *    netCDF Fortran APIs. Memory is never reordered; Python sees a(i,j,k) as a[k-1,j-1,i-1].
 *  - Memory. By default ckptio_write / ckptio_write_segment COPY the data into a staging buffer before they
 *    return: the caller's array may be changed or freed right away. ckptio_set_zero_copy(file, 1) opts in to
 *    referencing the caller's memory instead (no copy, no extra memory) with the rules of MPI's nonblocking
 *    buffers: the memory must stay allocated and unchanged until ckptio_close() returns. In zero-copy mode
 *    every block is checksummed at write and verified before the commit: a changed block makes ckptio_close
 *    fail on every rank (CKPTIO_ERR_ARGUMENT) and nothing is committed. Freed memory cannot be detected
 *    reliably (reading it may crash), so never pass temporaries in zero-copy mode.
 *  - Thread safety: every call takes the Python GIL; calls on one handle must not overlap.
 */
#ifndef CKPTIO_H
#define CKPTIO_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPTIO_MAX_NDIM 8 /* shape arrays filled by ckptio_inquire_var need this many elements */

/* Status codes. They mirror ckptio's exception classes (ckptio/errors.py); a collective failure reports the
 * code of the most specific error seen on any rank. Keep in sync with the parameters in ckptio_mod.F90. */
typedef enum ckptio_status {
  CKPTIO_OK = 0,
  CKPTIO_ERR_DECLARATION = 1,  /* DeclarationError: inconsistent shapes, dtypes, overlaps, coverage, attrs */
  CKPTIO_ERR_CORRUPT = 2,      /* CorruptCheckpointError: checksum / header / index mismatch */
  CKPTIO_ERR_INCOMPLETE = 3,   /* IncompleteCheckpointError: never committed, or truncated */
  CKPTIO_ERR_FORMAT = 4,       /* FormatVersionError, UnknownFormatError: not a (supported) checkpoint */
  CKPTIO_ERR_NOT_FOUND = 5,    /* ReadRequestError: no such variable / hyperslab outside it; no such attribute */
  CKPTIO_ERR_IO = 6,           /* CheckpointIOError, OSError, MPI-IO errors: missing path, permissions, full disk */
  CKPTIO_ERR_CAPABILITY = 7,   /* CapabilityError: the backend cannot do it (unknown backend, dtype, segments) */
  CKPTIO_ERR_ARGUMENT = 8,     /* bad argument to this API: NULL pointer, dtype mismatch on read, bad handle */
  CKPTIO_ERR_COLLECTIVE = 9,   /* CollectiveError without a more specific cause */
  CKPTIO_ERR_CHECKPOINT = 10,  /* any other CheckpointError */
  CKPTIO_ERR_PYTHON = 11,      /* any other Python exception (a bug; the message holds the traceback) */
  CKPTIO_ERR_INIT = 12         /* the interpreter, numpy, mpi4py or ckptio could not be started / imported,
                                  MPI not initialized, or called after ckptio_finalize() */
} ckptio_status;

/* Element types. */
typedef enum ckptio_dtype {
  CKPTIO_DTYPE_OTHER = 0, /* only returned by ckptio_inquire_var: a type this API cannot read (e.g. float16) */
  CKPTIO_INT8 = 1,
  CKPTIO_INT16 = 2,
  CKPTIO_INT32 = 3,
  CKPTIO_INT64 = 4,
  CKPTIO_UINT8 = 5,
  CKPTIO_UINT16 = 6,
  CKPTIO_UINT32 = 7,
  CKPTIO_UINT64 = 8,
  CKPTIO_FLOAT32 = 9,
  CKPTIO_FLOAT64 = 10,
  CKPTIO_BOOL = 11,       /* 1 byte, 0 or 1 (C bool, Fortran logical(c_bool)); not in PnetCDF files */
  CKPTIO_COMPLEX64 = 12,  /* float complex, complex(real32); not in PnetCDF files */
  CKPTIO_COMPLEX128 = 13  /* double complex, complex(real64); not in PnetCDF files */
} ckptio_dtype;

/* Order of shape and offset arrays (see the header comment). */
typedef enum ckptio_order { CKPTIO_ORDER_C = 0, CKPTIO_ORDER_FORTRAN = 1 } ckptio_order;

/* Opaque handle of an open checkpoint (being written, or opened for reading). */
typedef struct ckptio_file_s *ckptio_file;

/* ---- writing ------------------------------------------------------------------------------------------ */

/* Local. Start a checkpoint at `path` (one shared file) on `comm`; backend "mpiio" (NULL: default), "hdf5" or
 * "pnetcdf". Nothing is written before ckptio_close(). Keep `comm` valid until then. `*file` is output only:
 * a handle it held before is not closed (close it first; Fortran's ckptio_create reports an open handle). */
int ckptio_create(const char *path, MPI_Comm comm, const char *backend, ckptio_file *file);

/* Local. ckptio_create with the options of Python's ckptio.create; NULL or "" selects the default of each.
 *  - mode: "sync" (default) or "async": ckptio_close returns once the blocks are copied into ckptio's staging
 *    buffers; an I/O thread writes and commits (needs MPI_Init_thread with MPI_THREAD_MULTIPLE; otherwise
 *    ckptio warns on stderr and writes synchronously -- the handle rules below stay the same).
 *  - stage_dir: a fast tier (node-local, e.g. /dev/shm/job, the same path on every node): ckptio_close writes
 *    each rank's blocks there, the I/O thread drains them to `path` in the background, checksums verified.
 *  - compression: "zstd" or "zstd+shuffle", optionally ":LEVEL" (mpiio backend only).
 * Every rank must pass the same options (checked by ckptio_close on every rank). A handle created with mode
 * "async" or a stage_dir is a BACKGROUND handle: ckptio_close does not free it, ckptio_wait does (see below). */
int ckptio_create_ex(const char *path, MPI_Comm comm, const char *backend, const char *mode, const char *stage_dir,
                     const char *compression, ckptio_file *file);

/* Local. Zero-copy mode of a handle being written (default off: writes copy). enable != 0: the following
 * ckptio_write / ckptio_write_segment calls reference the caller's memory until ckptio_close() returns (see
 * "Memory" above); 0: they copy again. Blocks already declared keep the mode they were written with. */
int ckptio_set_zero_copy(ckptio_file file, int enable);

/* Local. Declare this rank's block of the global array `name`: local_shape elements at `offset` within
 * `global_shape`, dtype `dtype`, contiguous in C order. A rank that owns nothing passes a zero in local_shape
 * (data may then be NULL). */
int ckptio_write(ckptio_file file, const char *name, int dtype, int ndim, const int64_t *global_shape,
                 const int64_t *offset, const int64_t *local_shape, const void *data);
/* The same with an explicit order for the three shape arrays (CKPTIO_ORDER_FORTRAN: column-major data). */
int ckptio_write_order(ckptio_file file, const char *name, int dtype, int order, int ndim,
                       const int64_t *global_shape, const int64_t *offset, const int64_t *local_shape,
                       const void *data);

/* Local. Memory selection: declare the box of a larger local array as this rank's block -- e.g. the interior of
 * an array with guard (halo) cells -- without packing it first. `data` points to the caller's whole array of
 * `mem_shape` elements (contiguous in `order`); the block is its box of `local_shape` elements starting at
 * `mem_start` (0-based; NULL: zeros), placed at `offset` within `global_shape`. All four shape arrays are in
 * `order` (CKPTIO_ORDER_C or CKPTIO_ORDER_FORTRAN). This is HDF5's memory dataspace with a hyperslab selection
 * (H5Sselect_hyperslab(mem_space, H5S_SELECT_SET, mem_start, NULL, local_shape, NULL)) or an MPI subarray type
 * (MPI_Type_create_subarray(ndim, mem_shape, local_shape, mem_start, ...)) in one call.
 * Memory rules as for ckptio_write: by default only the selected box is copied before the call returns; in
 * zero-copy mode nothing is copied and the backends read the box in place from the whole array at close (MPI
 * hindexed memory type, HDF5 memory dataspace, PnetCDF flexible API), so the whole array must stay allocated
 * and the box unchanged until ckptio_close returns. Example, u[nz+2g][ny+2g][nx+2g] with g guard cells:
 *   int64_t full[3] = {nz + 2 * g, ny + 2 * g, nx + 2 * g}, start[3] = {g, g, g}, box[3] = {nz, ny, nx};
 *   ckptio_write_sub(f, "u", CKPTIO_FLOAT64, CKPTIO_ORDER_C, 3, gshape, offset, full, start, box, u); */
int ckptio_write_sub(ckptio_file file, const char *name, int dtype, int order, int ndim, const int64_t *global_shape,
                     const int64_t *offset, const int64_t *mem_shape, const int64_t *mem_start,
                     const int64_t *local_shape, const void *data);

/* Local. Declare this rank's variable-length 1-D segment of `name` (n elements, n may differ between ranks and
 * be 0). Segments are concatenated in rank order; offsets are found at close. */
int ckptio_write_segment(ckptio_file file, const char *name, int dtype, int64_t n, const void *data);
/* Local: this rank's N-d segment, an array of local_shape[0..ndim) in C order whose rows (the first axis, any
 * length including 0) are laid end to end in rank order; local_shape[1..ndim) must be the same on every rank
 * (else ckptio_close fails on every rank). Tracers (n, 4) on each rank: a variable of (sum of n, 4). */
int ckptio_write_segment_nd(ckptio_file file, const char *name, int dtype, int ndim, const int64_t *local_shape,
                            const void *data);

/* Local. Attributes of the checkpoint; must be set identically on every rank (checked at close). */
int ckptio_set_attr_int64(ckptio_file file, const char *key, int64_t value);
int ckptio_set_attr_double(ckptio_file file, const char *key, double value);
int ckptio_set_attr_string(ckptio_file file, const char *key, const char *value); /* NULL: a null value */

/* Local. Per-variable metadata, as Python's write(name, ..., dims=, attrs=): dimension names (one per axis, in
 * `order`: with CKPTIO_ORDER_FORTRAN the first name belongs to the fastest axis and they are stored reversed,
 * like shapes) and attributes of variable `name` (units, long_name, ...; integers are stored as int64, doubles
 * as float64). They apply to this rank's following ckptio_write* calls of `name`, so call them BEFORE its first
 * write (afterwards: CKPTIO_ERR_ARGUMENT). Every rank that writes blocks of `name` must declare the same dims and
 * attributes (checked at close, on every rank). A dimension name is one length in the whole checkpoint (variables
 * sharing it share the HDF5 dimension scale / netCDF dimension); default names are `<name>_d0`, `<name>_d1`, ...
 * Python reads them as reader.variables[name].dims / .attrs. */
int ckptio_set_dims(ckptio_file file, const char *name, int order, int ndim, const char *const *dims);
int ckptio_set_var_attr_int64(ckptio_file file, const char *name, const char *key, int64_t value);
int ckptio_set_var_attr_double(ckptio_file file, const char *name, const char *key, double value);
int ckptio_set_var_attr_string(ckptio_file file, const char *name, const char *key, const char *value);

/* Collective. For a checkpoint being written: validate, write, commit atomically (the checkpoint appears under
 * its name only if every rank succeeded). For a checkpoint opened for reading: close the file. The handle is
 * freed in every case (also on failure). */
int ckptio_close(ckptio_file file);
/* Background handles (mode "async" or a stage_dir): ckptio_close returns once the data is staged and keeps the
 * handle -- also when it fails -- like an MPI request: call ckptio_wait on it exactly once. Until then the
 * caller's arrays may be reused (the data was copied), and only ckptio_wait and ckptio_done accept the handle. */

/* Local. Block until the background checkpoint of a closed background handle is committed, and free the handle.
 * A failure of the background write is returned here on every rank, with the same status and message (the
 * ranks' I/O threads agree on it). CKPTIO_OK when ckptio_close failed (nothing is pending then). */
int ckptio_wait(ckptio_file file);
/* Local. *flag = 1 when nothing of that checkpoint is still written in the background (then ckptio_wait does
 * not block), else 0. The handle stays valid. */
int ckptio_done(ckptio_file file, int *flag);
/* Local. Wait for every background checkpoint of this process, and return the first failure that no ckptio_wait
 * reported (whose handle was not waited for yet). ckptio_finalize does this first, too. */
int ckptio_wait_all(void);

/* ---- reading ------------------------------------------------------------------------------------------ */

/* Collective. Open a committed checkpoint (the backend is detected from the file). Any rank count. */
int ckptio_open(const char *path, MPI_Comm comm, ckptio_file *file);

/* Collective. ckptio_open with the stage_dir the checkpoint was written with (NULL or "": ckptio_open): when the
 * newest staged copy of `path` is usable (same rank count, every rank's piece on its own node, checksums
 * verified, not older than `path`), the restart reads from the node-local stages (Python's ckptio.open(...,
 * stage_dir=)); otherwise, with a warning on stderr naming what is missing, from `path`. */
int ckptio_open_ex(const char *path, MPI_Comm comm, const char *stage_dir, ckptio_file *file);

/* Collective. Read the hyperslab (offset, shape) of `name` into `buffer` (C order, prod(shape) elements of
 * `dtype`, which must be the variable's dtype). Every rank may ask for a different hyperslab, or an empty
 * one (a zero in shape). Reads are two-phase aggregated (ckptio.Reader). */
int ckptio_read(ckptio_file file, const char *name, int dtype, int ndim, const int64_t *offset,
                const int64_t *shape, void *buffer);
int ckptio_read_order(ckptio_file file, const char *name, int dtype, int order, int ndim, const int64_t *offset,
                      const int64_t *shape, void *buffer);

/* Collective. Memory selection on read: read the hyperslab (offset, shape) of `name` into the box of `shape`
 * elements at `mem_start` (0-based; NULL: zeros) of the caller's array of `mem_shape` elements (contiguous in
 * `order`, which applies to all four shape arrays), e.g. the interior of a guard-celled array. Elements outside
 * the box are not touched. */
int ckptio_read_sub(ckptio_file file, const char *name, int dtype, int order, int ndim, const int64_t *offset,
                    const int64_t *mem_shape, const int64_t *mem_start, const int64_t *shape, void *buffer);

/* One request of ckptio_read_many: like the arguments of ckptio_read. */
typedef struct ckptio_read_request {
  const char *name;
  int dtype;
  int ndim;
  const int64_t *offset; /* ndim elements (NULL: zeros) */
  const int64_t *shape;  /* ndim elements */
  void *buffer;          /* prod(shape) elements of dtype */
} ckptio_read_request;

/* Collective. Several reads in one two-phase exchange (ckptio.Reader.read_many): much cheaper than one
 * ckptio_read per variable when there are many small variables. The number of requests may differ between
 * ranks (also 0, requests may then be NULL); order applies to every request's offset and shape. A problem
 * with any request on any rank fails the call on every rank, and then no buffer has been written. */
int ckptio_read_many(ckptio_file file, int order, int nrequests, const ckptio_read_request *requests);

/* A memory selection of a read request (ckptio_read_many_sub): the request's buffer is the caller's whole array
 * of mem_shape elements, the request's shape the box at mem_start (0-based, NULL: zeros) that receives the
 * hyperslab; mem_shape NULL: no selection (the buffer holds exactly shape elements). Same order as the request. */
typedef struct ckptio_memsel {
  const int64_t *mem_shape;
  const int64_t *mem_start;
} ckptio_memsel;

/* Collective. ckptio_read_many with a memory selection per request (selections: nrequests entries, or NULL for
 * none): e.g. every variable of a restart read into the interior of its guard-celled array in one exchange.
 * Elements outside the boxes are not touched. */
int ckptio_read_many_sub(ckptio_file file, int order, int nrequests, const ckptio_read_request *requests,
                         const ckptio_memsel *selections);

/* Local. Attributes of an opened checkpoint. Integers are converted to double by get_attr_double; a string
 * longer than buflen-1 bytes gives CKPTIO_ERR_ARGUMENT (the message says how long it is). */
int ckptio_get_attr_int64(ckptio_file file, const char *key, int64_t *value);
int ckptio_get_attr_double(ckptio_file file, const char *key, double *value);
int ckptio_get_attr_string(ckptio_file file, const char *key, char *buf, size_t buflen);

/* Local. dtype, ndim and global shape (CKPTIO_MAX_NDIM elements of room) of variable `name`. Any of the
 * output pointers may be NULL. A per-rank segment variable reports every rank's rows (its total length) and
 * its trailing shape: ndim 1 for ckptio_write_segment, the array's ndim for ckptio_write_segment_nd. */
int ckptio_inquire_var(ckptio_file file, const char *name, int *dtype, int *ndim, int64_t *shape);
int ckptio_inquire_var_order(ckptio_file file, const char *name, int order, int *dtype, int *ndim,
                             int64_t *shape);

/* Local. Number of variables of an opened checkpoint, and the name of the i-th (0-based, sorted by name). */
int ckptio_num_vars(ckptio_file file, int *nvars);
int ckptio_var_name(ckptio_file file, int index, char *buf, size_t buflen);

/* ---- finding checkpoints ------------------------------------------------------------------------------ */

/* Local. Path of the newest complete and valid checkpoint in `dir` whose name starts with `prefix` (NULL:
 * "chk"), written to buf; an empty string (and CKPTIO_OK) when there is none. */
int ckptio_latest(const char *dir, const char *prefix, char *buf, size_t buflen);
/* Collective. The same, looked up by rank 0 of `comm` and broadcast (what a restarting job should use). Every
 * rank passes the same dir and prefix (and, for the functions below, stage_dir): one that differs on any rank is
 * CKPTIO_ERR_DECLARATION on every rank. */
int ckptio_latest_comm(MPI_Comm comm, const char *dir, const char *prefix, char *buf, size_t buflen);

/* Collective. Like ckptio_latest_comm, but every block of a candidate is read and its checksum verified: the
 * newest checkpoint that verifies, falling back past corrupt or incomplete newer ones (as ckptio.Series.latest
 * does on restart). Costs a full read of the skipped and the chosen checkpoint, by rank 0. Each skipped one is
 * named in a warning on stderr; a damaged one is marked (.NAME.ckptio-damaged beside it): no later lookup reads
 * or chooses it again, retention never deletes it, and a new checkpoint committed under its name moves it aside
 * to NAME.damaged. An empty string (and CKPTIO_OK) also when checkpoints exist but none verifies: a code that
 * must not start over then uses ckptio_latest_verified_n, which says how many were skipped. */
int ckptio_latest_verified(MPI_Comm comm, const char *dir, const char *prefix, char *buf, size_t buflen);

/* Collective. Start checkpoint `step` of the series `{dir}/{prefix}_{step:06d}` (prefix NULL: "chk"), like
 * ckptio.Series(dir, comm, prefix=prefix, keep=keep, backend=backend).create(step): the directory is created
 * if missing, and once ckptio_close has committed the checkpoint, only the newest `keep` complete checkpoints
 * of the series are kept (rank 0 deletes the others). Restart with ckptio_latest_verified. */
int ckptio_series_create(MPI_Comm comm, const char *dir, const char *prefix, int keep, int64_t step,
                         const char *backend, ckptio_file *file);

/* Collective. ckptio_series_create with the options of ckptio_create_ex (NULL or "": the default of each): mode
 * "async" and a stage_dir make the series' checkpoints background handles (ckptio_close, then ckptio_wait
 * exactly once); retention then runs in the I/O thread right after each background commit. Every rank passes
 * the same options. Restart from the stage with ckptio_open_ex(path, comm, stage_dir, ...). */
int ckptio_series_create_ex(MPI_Comm comm, const char *dir, const char *prefix, int keep, int64_t step,
                            const char *backend, const char *mode, const char *stage_dir, const char *compression,
                            ckptio_file *file);

/* Collective. Multi-level checkpoints (docs/guide/async.md, "Multi-level checkpoints"): ckptio_series_create_ex
 * plus the multi-level options of ckptio.Series, for a node-local stage_dir (required with them):
 *  - redundancy: "single" (the node's own stage), "partner" (each node's pieces also copied to a partner node)
 *    or "xor" (parity over a set of nodes, one lost node per set survives); NULL or "": none, as ckptio_series_create_ex;
 *  - drain_every: k >= 1: only every k-th checkpoint this process creates in the series (counted per dir and
 *    prefix, from 1) is drained to `dir`; the others stay on the node-local level with their redundancy;
 *  - failure_group: this rank's node's group (e.g. its rack; the same on every rank of a node), kept apart by
 *    partners and XOR sets; NULL or "": each node is its own group.
 * The checkpoint is a background handle (ckptio_close, then ckptio_wait). A bad or differing option on any rank
 * fails this call on every rank (CKPTIO_ERR_DECLARATION). Restart with ckptio_latest_verified_ex(comm, dir,
 * prefix, stage_dir, ...), which rebuilds and drains the newest node-local checkpoint first. */
int ckptio_series_create_ml(MPI_Comm comm, const char *dir, const char *prefix, int keep, int64_t step,
                            const char *backend, const char *mode, const char *stage_dir, const char *compression,
                            const char *redundancy, int drain_every, const char *failure_group,
                            ckptio_file *file);

/* Collective. The restart point of a multi-level series (ckptio.Series(dir, comm, prefix=prefix,
 * stage_dir=stage_dir, must_exist=True).latest()): if the newest checkpoint of the series is only on the
 * node-local level (drain_every > 1, or a drain that was interrupted), every rank's piece is verified on its own
 * node, the pieces a lost or wiped node took with it are rebuilt from the other nodes' redundancy (checksums
 * verified), and the checkpoint is drained to `dir`; then the newest checkpoint of `dir` that verifies, as
 * ckptio_latest_verified. Needs the rank count and the nodes' stages of the job that wrote the staged
 * checkpoint (otherwise `dir`'s newest, with a warning on stderr saying why). stage_dir NULL or "":
 * ckptio_latest_verified. An empty string when there is none; `dir` must exist. */
int ckptio_latest_verified_ex(MPI_Comm comm, const char *dir, const char *prefix, const char *stage_dir, char *buf,
                              size_t buflen);

/* Collective. ckptio_latest_verified_ex (stage_dir NULL or "": ckptio_latest_verified), and in *nskipped (may
 * be NULL) how many checkpoints of the series newer than the answer were skipped as damaged, incomplete or
 * unreadable (superseded ones are not counted). An empty path with *nskipped > 0 means "checkpoints exist but
 * none is valid": a restart job should stop there rather than start from step 0 (they are kept). */
int ckptio_latest_verified_n(MPI_Comm comm, const char *dir, const char *prefix, const char *stage_dir, char *buf,
                             size_t buflen, int *nskipped);

/* Collective. Retention, as ckptio.Series(dir, prefix=prefix, keep=keep) does after each commit: delete all but
 * the newest `keep` complete checkpoints named `{prefix}_NNNNNN` in `dir` (prefix NULL: "chk"); rank 0 deletes.
 * Checkpoints a lookup marked damaged are never deleted (see ckptio_latest_verified).
 * nremoved may be NULL. */
int ckptio_prune(MPI_Comm comm, const char *dir, const char *prefix, int keep, int *nremoved);

/* ---- batch jobs (docs/guide/batch.md) ------------------------------------------------------------------ */

/* Collective, cheap (one small allreduce): *should_exit = 1 on every rank when the batch job should write its
 * final checkpoint and leave, 0 otherwise -- the same on every rank, and 1 for good once it was 1. It becomes 1
 * when one of the signals in CKPTIO_EXIT_SIGNALS (default "USR1,TERM") arrived on ANY rank, or when the job's
 * remaining wall time (asked from Slurm once, by rank 0 at the first call) is shorter than the last checkpoint
 * closed on this process took plus CKPTIO_EXIT_MARGIN seconds (default 30). Outside a batch job only the
 * signals count. The first call installs the signal handlers: make it early (it returns 0), from the thread
 * that made the first ckptio call (the handlers chain to Python handlers only: a C handler of your program for
 * those signals is replaced). Then: the final checkpoint, ckptio_wait of background ones, MPI_Finalize; the
 * job script requeues (or see ckptio.batch.requeue). */
int ckptio_should_exit(MPI_Comm comm, int *should_exit);

/* ---- errors and life cycle ---------------------------------------------------------------------------- */

/* Short constant description of a status code. */
const char *ckptio_strerror(int status);

/* The full message of the most recent failed call on this thread, NUL-terminated and truncated to buflen
 * bytes. Returns that call's status (CKPTIO_OK if no call has failed). buf may be NULL to get the status. */
int ckptio_last_error(char *buf, size_t buflen);

/* Optional: start the interpreter and import ckptio now (otherwise the first call does it). */
int ckptio_initialize(void);

/* Wait for every background checkpoint (a failure nobody was told about is returned), release ckptio's Python
 * objects and, if this library started the interpreter, finalize it (Py_FinalizeEx).
 * Call it once, from the thread that made the first ckptio call, after the last ckptio call and BEFORE
 * MPI_Finalize(); no ckptio call works afterwards (the interpreter cannot be restarted with numpy loaded).
 * An interpreter the library did not start (host program in Python) is left running. */
int ckptio_finalize(void);

/* ---- entry points for Fortran (classic integer communicator handles; used by module ckptio) ------------
 * Handles made by these are Fortran handles: their messages use Fortran names (ckptio_get_attr, not
 * ckptio_get_attr_int64) and Fortran order for shapes and offsets. The communicator is converted only after
 * checking that MPI is initialized and not finalized (CKPTIO_ERR_INIT otherwise). `problem` (non-empty: an
 * argument problem found in Fortran) takes part in the call's agreement so that every rank fails together. */
int ckptio_create_f(const char *path, MPI_Fint comm, const char *backend, const char *mode, const char *stage_dir,
                    const char *compression, ckptio_file *file);
int ckptio_open_f(const char *path, MPI_Fint comm, const char *stage_dir, const char *problem, ckptio_file *file);
int ckptio_latest_comm_f(MPI_Fint comm, const char *dir, const char *prefix, char *buf, size_t buflen);
int ckptio_latest_f(const char *dir, const char *prefix, char *buf, size_t buflen);
int ckptio_latest_verified_f(MPI_Fint comm, const char *dir, const char *prefix, char *buf, size_t buflen);
int ckptio_series_create_f(MPI_Fint comm, const char *dir, const char *prefix, int keep, int64_t step,
                           const char *backend, const char *mode, const char *stage_dir, const char *compression,
                           const char *problem, ckptio_file *file);
int ckptio_series_create_ml_f(MPI_Fint comm, const char *dir, const char *prefix, int keep, int64_t step,
                              const char *backend, const char *mode, const char *stage_dir, const char *compression,
                              const char *redundancy, int drain_every, const char *failure_group,
                              const char *problem, ckptio_file *file);
int ckptio_latest_verified_n_f(MPI_Fint comm, const char *dir, const char *prefix, const char *stage_dir, char *buf,
                               size_t buflen, int *nskipped);
int ckptio_latest_verified_ex_f(MPI_Fint comm, const char *dir, const char *prefix, const char *stage_dir, char *buf,
                                size_t buflen);
int ckptio_prune_f(MPI_Fint comm, const char *dir, const char *prefix, int keep, int *nremoved);
/* internal to module ckptio: Fortran-order write (segment 1: ckptio_write_segment, 2: with rows=.true.; force_copy != 0: copy
 * even in zero-copy mode, for a temporary made by the module) and read, with a problem found in Fortran;
 * mem_shape non-NULL: a memory selection (the block is the box local_shape/shape at mem_start of the array) */
int ckptio_write_f(ckptio_file file, const char *name, int dtype, int ndim, const int64_t *global_shape,
                   const int64_t *offset, const int64_t *local_shape, const void *data, int segment, int force_copy,
                   const char *problem, const int64_t *mem_shape, const int64_t *mem_start);
int ckptio_read_f(ckptio_file file, const char *name, int dtype, int ndim, const int64_t *offset,
                  const int64_t *shape, void *buffer, const char *problem, const int64_t *mem_shape,
                  const int64_t *mem_start);
int ckptio_read_many_f(ckptio_file file, int nrequests, const ckptio_read_request *requests,
                       const ckptio_memsel *selections, const char *problem);
/* ckptio_set_dims for module ckptio: ndim NUL-terminated names one after the other in `joined`, Fortran order */
int ckptio_set_dims_f(ckptio_file file, const char *name, int ndim, const char *joined);
int ckptio_should_exit_f(MPI_Fint comm, int *should_exit);
int ckptio_set_error_f(int status, const char *message);

#ifdef __cplusplus
}
#endif

#endif /* CKPTIO_H */
