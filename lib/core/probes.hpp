// USDT probes (provider "ibvcap"): the points an outside tool (bpftrace,
// perf, SystemTap) needs to audit the ledger without trusting ibvcap's own
// report. The names, arguments and the report count each one adds up to are
// a contract: docs/observability.md, "USDT probes". This is the one file that
// includes <sys/sdt.h> (Debian systemtap-sdt-dev).
//
// Each probe site is a `nop`: sys/sdt.h (_SDT_ASM_BODY) emits `_SDT_NOP` and
// records the site, the provider, the name and where each argument lives in
// an ELF note (.note.stapsdt); a tracer that attaches replaces the nop with a
// breakpoint. Each probe also has a semaphore, the is-enabled form of
// sys/sdt.h: with _SDT_HAS_SEMAPHORES defined, _SDT_SEMAPHORE puts the
// address of `unsigned short <provider>_<name>_semaphore` in the probe's
// note, and the variable lives in the section ".probes" (the declarations
// below are those systemtap's `dtrace -h` writes; lib/core/probes.cpp defines
// them). A tracer that attaches adds one to the semaphore and subtracts one
// when it leaves: the kernel does it for a uprobe given a ref_ctr_offset
// (Linux >= 4.20, kernel/events/uprobes.c, also in processes that start
// after the attach), and bpftrace passes that offset from the note (or, on an
// older kernel, writes the semaphore of a running process itself).
//
// So IBVCAP_PROBEn(name, args...) is
//     if (IBVCAP_PROBE_ENABLED(name)) [[unlikely]] { <the probe> }
// and its arguments are computed only while someone listens: untraced, a
// site costs one load of its semaphore and a branch not taken. Work a site
// does for its probe's arguments beyond the macro's own (Demux::accept:
// `missing` before the tracker) goes under the same test. Nothing here
// allocates, blocks or logs.
//
// With the CMake option IBVCAP_USDT=OFF (a build to measure what the probes
// cost: bench/run.sh, section 8) there are no probes, no semaphores and no
// <sys/sdt.h>: IBVCAP_PROBE_ENABLED is false and IBVCAP_PROBEn keeps its
// arguments only in a branch never taken (so a value computed for a probe
// alone is not an unused variable).
#pragma once

#include <cstdint>

#ifndef IBVCAP_USDT
#define IBVCAP_USDT 1
#endif

// The probes, each with its semaphore (one list for lib/core/probes.cpp too).
#define IBVCAP_PROBE_NAMES(X) \
    X(frame)                  \
    X(gap)                    \
    X(reason)                 \
    X(write)                  \
    X(write_drop)             \
    X(completion)             \
    X(recovery_start)         \
    X(recovery_end)           \
    X(run_start)              \
    X(run_stop)

#if IBVCAP_USDT

// Each argument in a register or as a constant, never as a memory operand:
// the default constraint ("nor") lets the compiler name a static array
// element as `8@40+symbol(%rip)`, which bpftrace cannot read ("deref ident
// is not handled yet"). sys/sdt.h documents this override.
#ifndef STAP_SDT_ARG_CONSTRAINT
#define STAP_SDT_ARG_CONSTRAINT nr
#endif
#if defined _SYS_SDT_H && !defined _SDT_HAS_SEMAPHORES
#error "<sys/sdt.h> was included before lib/core/probes.hpp: its probes would have no semaphores"
#endif
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

// The semaphores, as `dtrace -h` declares them (C names: the note names them
// in assembler). Hidden: one per executable, addressed directly.
#define IBVCAP_PROBE_DECLARE_SEMAPHORE_(name)                               \
    extern unsigned short ibvcap_##name##_semaphore __attribute__((unused)) \
    __attribute__((section(".probes"))) __attribute__((visibility("hidden")));
extern "C" {
IBVCAP_PROBE_NAMES(IBVCAP_PROBE_DECLARE_SEMAPHORE_)
}

// Whether a tracer is attached to probe `name` now. A relaxed atomic load:
// read at each site, never kept from an earlier one (the tracer changes it
// from outside).
#define IBVCAP_PROBE_ENABLED(name) \
    (__atomic_load_n(&ibvcap_##name##_semaphore, __ATOMIC_RELAXED) != 0)

#define IBVCAP_PROBE_IF_(name, fire)                   \
    do {                                               \
        if (IBVCAP_PROBE_ENABLED(name)) [[unlikely]] { \
            fire;                                      \
        }                                              \
    } while (0)

// IBVCAP_PROBEn(name, args...): a probe of provider ibvcap.
#define IBVCAP_PROBE0(name) IBVCAP_PROBE_IF_(name, DTRACE_PROBE(ibvcap, name))
#define IBVCAP_PROBE1(name, a) IBVCAP_PROBE_IF_(name, DTRACE_PROBE1(ibvcap, name, a))
#define IBVCAP_PROBE2(name, a, b) IBVCAP_PROBE_IF_(name, DTRACE_PROBE2(ibvcap, name, a, b))
#define IBVCAP_PROBE3(name, a, b, c) IBVCAP_PROBE_IF_(name, DTRACE_PROBE3(ibvcap, name, a, b, c))
#define IBVCAP_PROBE4(name, a, b, c, d) \
    IBVCAP_PROBE_IF_(name, DTRACE_PROBE4(ibvcap, name, a, b, c, d))
#define IBVCAP_PROBE5(name, a, b, c, d, e) \
    IBVCAP_PROBE_IF_(name, DTRACE_PROBE5(ibvcap, name, a, b, c, d, e))
#define IBVCAP_PROBE6(name, a, b, c, d, e, f) \
    IBVCAP_PROBE_IF_(name, DTRACE_PROBE6(ibvcap, name, a, b, c, d, e, f))

#else  // !IBVCAP_USDT

namespace ibvcap::probe {
template <typename... T>
constexpr void unused(const T&...) {}
}  // namespace ibvcap::probe

#define IBVCAP_PROBE_ENABLED(name) false
#define IBVCAP_PROBE_OFF_(...)                    \
    do {                                          \
        if (false) {                              \
            ::ibvcap::probe::unused(__VA_ARGS__); \
        }                                         \
    } while (0)
#define IBVCAP_PROBE0(name) IBVCAP_PROBE_OFF_()
#define IBVCAP_PROBE1(name, a) IBVCAP_PROBE_OFF_(a)
#define IBVCAP_PROBE2(name, a, b) IBVCAP_PROBE_OFF_(a, b)
#define IBVCAP_PROBE3(name, a, b, c) IBVCAP_PROBE_OFF_(a, b, c)
#define IBVCAP_PROBE4(name, a, b, c, d) IBVCAP_PROBE_OFF_(a, b, c, d)
#define IBVCAP_PROBE5(name, a, b, c, d, e) IBVCAP_PROBE_OFF_(a, b, c, d, e)
#define IBVCAP_PROBE6(name, a, b, c, d, e, f) IBVCAP_PROBE_OFF_(a, b, c, d, e, f)

#endif  // IBVCAP_USDT

namespace ibvcap::probe {

// The sequence verdict of ibvcap:frame (arg4). Finer than
// SequenceTracker::Kind where the report needs it: an out-of-order frame
// either filled a frame counted missing (late_fill), or came before the
// stream's first frame (before_start), or was too late to classify.
enum Verdict : std::uint8_t {
    first = 0,         // the stream's first frame
    in_order = 1,      // the next frame
    gap = 2,           // ahead of the next: ibvcap:gap fired just before
    duplicate = 3,     // a frame already received
    late_fill = 4,     // out of order: filled a frame counted missing
    before_start = 5,  // out of order: earlier than the stream's first frame
    too_late = 6,      // out of order, more than the window behind: not classified
    implausible = 7,   // too far from the stream to place (not yet a restart)
    restart = 8,       // completed a run that restarted the stream
};

// Why a writer dropped records (ibvcap:write_drop, arg2).
enum WriteDrop : std::uint8_t {
    no_buffer = 0,      // no free buffer (a live source) or the record is larger than one
    device_unheld = 1,  // payload in GPU memory that could not be held
    refused = 2,        // the output's format cannot hold the record
    output_failed = 3,  // the output failed (cannot create, write error)
    abandoned = 4,      // a second Ctrl-C: queued buffers not written
    thread_failed = 5,  // an exception on the disk thread
};

}  // namespace ibvcap::probe
