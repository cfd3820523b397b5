/* An LD_PRELOAD logger of glibc's malloc family (benchmarks/cpu/malloc_log.py builds and
   loads it). Every call is one 64-byte record in an anonymous map (never the heap it logs):
   a sequence number, the call and the calling thread, the request, the returned (or freed)
   address, the chunk's size word (glibc's header, flags in the low 3 bits), and the
   program break after the call (sbrk(0) reads glibc's cached value: no system call).
   mlog_mark(code) adds a marker record; mlog_dump(path) writes every record so far. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

enum { OP_MALLOC = 1, OP_FREE, OP_CALLOC, OP_REALLOC, OP_MEMALIGN, OP_MARK };

typedef struct {
  uint64_t seq, op_tid, size, addr, aux, head, brk, old_head;
} rec_t;

#define CAP (64ull << 20) /* records: 4 GiB of address space, touched only as used */
static rec_t *buf;
static atomic_uint_fast64_t next;
static atomic_int ready;
static __thread uint64_t tid __attribute__((tls_model("initial-exec")));

static rec_t *slot(void) {
  if (atomic_load(&ready) != 2) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&ready, &expected, 1)) {
      buf = mmap(NULL, CAP * sizeof(rec_t), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      atomic_store(&ready, 2);
    } else {
      while (atomic_load(&ready) != 2) {
      }
    }
  }
  uint64_t i = atomic_fetch_add(&next, 1);
  if (buf == MAP_FAILED || i >= CAP) return NULL;
  if (!tid) tid = (uint64_t)syscall(SYS_gettid);
  rec_t *r = &buf[i];
  r->seq = i;
  return r;
}

static uint64_t head_of(void *p) { return p ? ((uint64_t *)p)[-1] : 0; }

static void put(rec_t *r, int op, uint64_t size, void *addr, uint64_t aux, uint64_t old_head) {
  if (!r) return;
  r->op_tid = (uint64_t)op | (tid << 8);
  r->size = size;
  r->addr = (uint64_t)addr;
  r->aux = aux;
  r->head = op == OP_FREE ? old_head : head_of(addr);
  r->old_head = old_head;
  r->brk = (uint64_t)sbrk(0);
}

void *malloc(size_t n) {
  void *p = __libc_malloc(n);
  put(slot(), OP_MALLOC, n, p, 0, 0);
  return p;
}

void free(void *p) {
  if (!p) return;
  uint64_t h = head_of(p);
  rec_t *r = slot(); /* numbered before the call: a free's address may be reused at once */
  __libc_free(p);
  put(r, OP_FREE, 0, p, 0, h);
}

void *calloc(size_t k, size_t n) {
  void *p = __libc_calloc(k, n);
  put(slot(), OP_CALLOC, k * n, p, k, 0);
  return p;
}

void *realloc(void *old, size_t n) {
  uint64_t h = head_of(old);
  rec_t *r = slot();
  void *p = __libc_realloc(old, n);
  put(r, OP_REALLOC, n, p, (uint64_t)old, h);
  return p;
}

static void *aligned(size_t align, size_t n) {
  void *p = __libc_memalign(align, n);
  put(slot(), OP_MEMALIGN, n, p, align, 0);
  return p;
}

void *memalign(size_t align, size_t n) { return aligned(align, n); }
void *aligned_alloc(size_t align, size_t n) { return aligned(align, n); }
void *valloc(size_t n) { return aligned((size_t)sysconf(_SC_PAGESIZE), n); }
void *pvalloc(size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return aligned(page, (n + page - 1) & ~(page - 1));
}

int posix_memalign(void **out, size_t align, size_t n) {
  if (align % sizeof(void *) || (align & (align - 1)) || !align) return EINVAL;
  void *p = aligned(align, n);
  if (!p && n) return ENOMEM;
  *out = p;
  return 0;
}

void mlog_mark(uint64_t code) { put(slot(), OP_MARK, code, NULL, 0, 0); }

/* Write records [0, count) to path; returns the count written, or -1. */
long mlog_dump(const char *path) {
  uint64_t count = atomic_load(&next);
  if (count > CAP) count = CAP;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  const char *p = (const char *)buf;
  size_t left = count * sizeof(rec_t);
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w <= 0) { close(fd); return -1; }
    p += w;
    left -= (size_t)w;
  }
  close(fd);
  return (long)count;
}
