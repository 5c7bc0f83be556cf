/*
 * Lets the linux-x64-musl release binary start on glibc Debian, which has musl's loader and
 * libc (package `musl`) but no musl build of libstdc++/libgcc_s (Alpine: `apk add libstdc++`).
 * The binary is given Debian's glibc builds of those two instead; musl's loader ignores symbol
 * versions, so they link against musl except for the few glibc-only names below, which this
 * library (built with musl-gcc, installed as ld-linux-x86-64.so.2, a library they need)
 * supplies. Test-only: what a release on Alpine gets from Alpine's own libstdc++ and libgcc.
 */
#define _GNU_SOURCE
#include <link.h>
#include <locale.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

/* 0 = "other threads may exist": libstdc++ keeps its atomic reference counts. */
char __libc_single_threaded = 0;

/* libgcc's CPU feature table; left zeroed (no features known), so nothing picks an unsupported path. */
struct { unsigned vendor, type, subtype, features[1]; } __cpu_model;
int __cpu_indicator_init(void) { return 0; }

size_t __strftime_l(char *s, size_t n, const char *format, const struct tm *tm, locale_t loc) {
  return strftime_l(s, n, format, tm, loc);
}

uint32_t arc4random(void) {
  uint32_t value;
  while (getrandom(&value, sizeof value, 0) != sizeof value) {}
  return value;
}

/* thread_local destructors: run when their thread ends, through a pthread key. */
struct dtor { void (*fn)(void *); void *obj; struct dtor *next; };
static pthread_key_t dtor_key;
static pthread_once_t dtor_once = PTHREAD_ONCE_INIT;
static void run_dtors(void *head) {
  for (struct dtor *d = head, *next; d; d = next) { next = d->next; d->fn(d->obj); free(d); }
}
static void make_dtor_key(void) { pthread_key_create(&dtor_key, run_dtors); }
int __cxa_thread_atexit_impl(void (*fn)(void *), void *obj, void *dso) {
  (void)dso;
  pthread_once(&dtor_once, make_dtor_key);
  struct dtor *d = malloc(sizeof *d);
  if (!d) return -1;
  d->fn = fn;
  d->obj = obj;
  d->next = pthread_getspecific(dtor_key);
  return pthread_setspecific(dtor_key, d);
}

/* glibc 2.35's unwinder lookup, which libgcc_s calls instead of dl_iterate_phdr; without a
 * right answer a C++ exception would find no handler and abort. Layout as glibc's x86_64. */
struct dl_find_object {
  unsigned long long flags;
  void *map_start, *map_end, *link_map, *eh_frame;
  unsigned long long reserved[7];
};
struct lookup { uintptr_t pc; struct dl_find_object *out; };
static int visit(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct lookup *l = data;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  void *eh_frame = 0;
  int inside = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *p = &info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + p->p_vaddr;
    if (p->p_type == PT_LOAD) {
      if (start < lo) lo = start;
      if (start + p->p_memsz > hi) hi = start + p->p_memsz;
      if (l->pc >= start && l->pc < start + p->p_memsz) inside = 1;
    } else if (p->p_type == PT_GNU_EH_FRAME) {
      eh_frame = (void *)start;
    }
  }
  if (!inside) return 0;
  *l->out = (struct dl_find_object){ .map_start = (void *)lo, .map_end = (void *)hi, .eh_frame = eh_frame };
  return 1;
}
int _dl_find_object(void *pc, struct dl_find_object *out) {
  struct lookup l = { (uintptr_t)pc, out };
  return dl_iterate_phdr(visit, &l) ? 0 : -1;
}
