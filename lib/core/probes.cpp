// The USDT probes' semaphores (lib/core/probes.hpp), defined once: each
// `unsigned short ibvcap_<name>_semaphore` in the section ".probes", zero
// until a tracer attaches to its probe (sys/sdt.h, _SDT_HAS_SEMAPHORES).
#include "lib/core/probes.hpp"

#if IBVCAP_USDT
#define IBVCAP_PROBE_DEFINE_SEMAPHORE_(name)                         \
    unsigned short ibvcap_##name##_semaphore __attribute__((unused)) \
    __attribute__((section(".probes"))) __attribute__((visibility("hidden"))) = 0;
extern "C" {
IBVCAP_PROBE_NAMES(IBVCAP_PROBE_DEFINE_SEMAPHORE_)
}
#endif
