/*
 * flagos accelerator ABI.
 *
 * A vendor back end ("accelerator") is a table of C functions. The c10 glue in
 * csrc/runtime/ talks only to this table, never to a vendor API, so adding a
 * device means adding one directory under csrc/accelerator/ that fills it in.
 *
 * Conventions:
 *  - Every function returns a flagos_status; outputs go through pointers.
 *  - A NULL flagos_stream means "the default stream of the stream's device",
 *    which is also where work without an explicit stream goes.
 *  - Devices are numbered 0..device_count-1 per accelerator.
 *  - Events carry a timestamp when created with timing enabled;
 *    event_elapsed_time reports milliseconds, like cudaEventElapsedTime.
 */
#ifndef FLAGOS_ACCELERATOR_H
#define FLAGOS_ACCELERATOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when the table changes incompatibly. A loader rejects a mismatch.
 * Compatible additions are optional entries appended to the table: a back end
 * built before one was added has a smaller struct_size, and a runtime reads the
 * entry only through FLAGOS_HAS_ENTRY (absent or NULL: not supported). */
#define FLAGOS_ABI_VERSION 1

typedef enum flagos_status {
  FLAGOS_SUCCESS = 0,
  FLAGOS_ERROR_INVALID_VALUE = 1,
  FLAGOS_ERROR_INVALID_DEVICE = 2,
  FLAGOS_ERROR_OUT_OF_MEMORY = 3,
  FLAGOS_ERROR_NOT_READY = 4, /* stream/event query: work still pending */
  FLAGOS_ERROR_NOT_SUPPORTED = 5,
  FLAGOS_ERROR_UNKNOWN = 99
} flagos_status;

typedef struct flagos_stream_impl* flagos_stream;
typedef struct flagos_event_impl* flagos_event;

typedef enum flagos_memcpy_kind {
  FLAGOS_MEMCPY_HOST_TO_DEVICE = 0,
  FLAGOS_MEMCPY_DEVICE_TO_HOST = 1,
  FLAGOS_MEMCPY_DEVICE_TO_DEVICE = 2
} flagos_memcpy_kind;

enum { FLAGOS_EVENT_DEFAULT = 0, FLAGOS_EVENT_DISABLE_TIMING = 1 };

/* What inductor and users plan with. Fill in the truth for the executor. */
typedef struct flagos_device_properties {
  char name[128];
  uint64_t total_memory;         /* bytes the allocator may hand out */
  int32_t multi_processor_count; /* parallel execution units */
  int32_t warp_size;             /* lanes scheduled together */
  int32_t max_threads_per_block;
  int32_t max_threads_per_multi_processor;
  int32_t regs_per_multiprocessor;
  uint64_t shared_memory_per_block;
  uint64_t l2_cache_size; /* bytes; benchmarkers flush this much */
  int32_t major;          /* compute capability, vendor-defined */
  int32_t minor;
  int32_t clock_rate_khz;
} flagos_device_properties;

typedef struct flagos_accelerator {
  uint32_t abi_version; /* FLAGOS_ABI_VERSION */
  uint32_t struct_size; /* sizeof(flagos_accelerator) the back end was built with */
  const char* name;     /* "host", "cuda", ... (FLAGOS_ACCELERATOR selects by it) */
  /* torch device type whose kernels run on this memory ("cpu" for host,
   * "cuda" for cuda): the eager fallback views flagos tensors as tensors of
   * this device, zero-copy. */
  const char* compute_device;

  const char* (*error_string)(flagos_status status);

  /* devices */
  flagos_status (*device_count)(int32_t* count);
  flagos_status (*get_device)(int32_t* device);
  flagos_status (*set_device)(int32_t device);
  flagos_status (*device_synchronize)(int32_t device);
  flagos_status (*get_device_properties)(int32_t device, flagos_device_properties* props);
  flagos_status (*mem_get_info)(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes);

  /* memory */
  flagos_status (*malloc)(int32_t device, void** ptr, size_t size);
  flagos_status (*free)(int32_t device, void* ptr);
  flagos_status (*memcpy_async)(void* dst, const void* src, size_t size, flagos_memcpy_kind kind, flagos_stream stream);
  flagos_status (*memset_async)(void* dst, int value, size_t size, flagos_stream stream);

  /* streams: work submitted to one stream runs in order */
  flagos_status (*stream_create)(int32_t device, int32_t priority, flagos_stream* stream);
  flagos_status (*stream_destroy)(flagos_stream stream);
  flagos_status (*stream_query)(flagos_stream stream); /* SUCCESS or NOT_READY */
  flagos_status (*stream_synchronize)(flagos_stream stream);
  flagos_status (*stream_wait_event)(flagos_stream stream, flagos_event event);

  /* events */
  flagos_status (*event_create)(int32_t device, uint32_t flags, flagos_event* event);
  flagos_status (*event_destroy)(flagos_event event);
  flagos_status (*event_record)(flagos_event event, flagos_stream stream);
  flagos_status (*event_query)(flagos_event event); /* SUCCESS or NOT_READY */
  flagos_status (*event_synchronize)(flagos_event event);
  flagos_status (*event_elapsed_time)(float* milliseconds, flagos_event start, flagos_event end);

  /* Optional; NULL where the compute device has no streams ("cpu"). The
   * compute device's c10 StreamId for a flagos stream of `device`, so that the
   * eager fallback runs the compute device's kernels on the current flagos
   * stream (for cuda: the id of the CUDA stream this flagos stream is). */
  flagos_status (*compute_stream_id)(int32_t device, flagos_stream stream, int64_t* stream_id);

  /* ---- appended in ABI 1 (optional; read through FLAGOS_HAS_ENTRY) ---- */

  /* Pinned (page-locked) host memory: what Tensor.pin_memory() and
   * DataLoader(pin_memory=True) hand out, and what non_blocking copies to and
   * from the device can run asynchronously on. `handle` identifies the
   * allocation to pinned_free; it is also the memory's allocation context seen
   * by the compute device's kernels (cuda: the block of torch's CUDA caching
   * host allocator, so CUDA's asynchronous copies record their use of it and
   * it is not reused before they finish). NULL: the accelerator has no pinned
   * memory, and pin_memory() raises. */
  flagos_status (*pinned_alloc)(size_t size, void** ptr, void** handle);
  flagos_status (*pinned_free)(void* handle);
} flagos_accelerator;

/* The smallest table a runtime accepts: everything up to the first appended entry. */
#define FLAGOS_ACCELERATOR_MIN_SIZE offsetof(flagos_accelerator, pinned_alloc)

/* Whether a back end's table (a pointer) has an appended entry and fills it in. */
#define FLAGOS_HAS_ENTRY(acc, entry) \
  ((acc)->struct_size >= offsetof(flagos_accelerator, entry) + sizeof((acc)->entry) && (acc)->entry != NULL)

/* Each accelerator directory exports one of these, named flagos_<name>_accelerator. */
typedef const flagos_accelerator* (*flagos_accelerator_entry)(void);

#ifdef __cplusplus
}
#endif

#endif /* FLAGOS_ACCELERATOR_H */
