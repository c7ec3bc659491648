// USDT probes (provider "ibvcap"): the points an outside tool (bpftrace,
// perf, SystemTap) needs to audit the ledger without trusting ibvcap's own
// report. The names, arguments and the report count each one adds up to are
// a contract: docs/observability.md, "USDT probes". This is the one file that
// includes <sys/sdt.h> (Debian systemtap-sdt-dev).
//
// A probe nobody attached to is a single `nop` at its site: sys/sdt.h
// (_SDT_ASM_BODY) emits `_SDT_NOP` and records the site, the provider, the
// name and where each argument lives in an ELF note (.note.stapsdt); a tracer
// that attaches replaces the nop with a breakpoint. No semaphores are used
// (DTRACE_PROBEn, not the _ENABLED form), so the arguments are values the
// code has at hand anyway: integers, and names that are pointers to static
// strings. Nothing here allocates, blocks or logs.
#pragma once

// Each argument in a register or as a constant, never as a memory operand:
// the default constraint ("nor") lets the compiler name a static array
// element as `8@40+symbol(%rip)`, which bpftrace cannot read ("deref ident
// is not handled yet"). sys/sdt.h documents this override.
#ifndef STAP_SDT_ARG_CONSTRAINT
#define STAP_SDT_ARG_CONSTRAINT nr
#endif
#include <sys/sdt.h>

#include <cstdint>

// IBVCAP_PROBEn(name, args...): a probe of provider ibvcap.
#define IBVCAP_PROBE0(name) DTRACE_PROBE(ibvcap, name)
#define IBVCAP_PROBE1(name, a) DTRACE_PROBE1(ibvcap, name, a)
#define IBVCAP_PROBE2(name, a, b) DTRACE_PROBE2(ibvcap, name, a, b)
#define IBVCAP_PROBE3(name, a, b, c) DTRACE_PROBE3(ibvcap, name, a, b, c)
#define IBVCAP_PROBE4(name, a, b, c, d) DTRACE_PROBE4(ibvcap, name, a, b, c, d)
#define IBVCAP_PROBE5(name, a, b, c, d, e) DTRACE_PROBE5(ibvcap, name, a, b, c, d, e)
#define IBVCAP_PROBE6(name, a, b, c, d, e, f) DTRACE_PROBE6(ibvcap, name, a, b, c, d, e, f)

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
