// The GPU XID stand-in (docs/observability.md, "GPU errors as a witness (XID)"):
// emit_xid's arguments mirror the NVIDIA driver's tracepoint
// nvidia:nvidia_dev_xid (open-gpu-kernel-modules, kernel-open/nvidia/
// nv-tracepoint.h: `dev` = pci_name(pdev), u32 `error_code`, `msg`). A test
// defines a uprobe event named nvidia/nvidia_dev_xid on emit_xid with fields
// of the same names, so that each call here is one "XID" in tracefs.
//
//   xid_helper --offset              the file offset of emit_xid (for uprobe_events)
//   xid_helper DEV CODE MSG [COUNT]  calls emit_xid(DEV, CODE, MSG) COUNT times (default 1)
#include <link.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" __attribute__((noinline, used)) void emit_xid(const char* dev, unsigned code,
                                                         const char* msg) {
    // The arguments stay live in their registers at entry, where the uprobe reads them.
    __asm__ volatile("" : : "r"(dev), "r"(code), "r"(msg) : "memory");
}

namespace {

// The offset in this executable's file of emit_xid: its address less the
// load bias is its virtual address; the PT_LOAD segment that holds it maps
// file offset p_offset at p_vaddr.
int find_offset(dl_phdr_info* info, std::size_t /*size*/, void* out) {
    const auto vaddr = reinterpret_cast<std::uintptr_t>(&emit_xid) - info->dlpi_addr;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& p = info->dlpi_phdr[i];
        if (p.p_type == PT_LOAD && vaddr >= p.p_vaddr && vaddr < p.p_vaddr + p.p_memsz) {
            *static_cast<std::uintptr_t*>(out) = vaddr - p.p_vaddr + p.p_offset;
            return 1;
        }
    }
    return 1;  // the first object is the executable: stop either way
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "--offset") == 0) {
        std::uintptr_t offset = 0;
        dl_iterate_phdr(find_offset, &offset);
        if (offset == 0) {
            std::fprintf(stderr, "xid_helper: emit_xid is in no loaded segment\n");
            return 1;
        }
        std::printf("%#lx\n", static_cast<unsigned long>(offset));
        return 0;
    }
    if (argc < 4 || argc > 5) {
        std::fprintf(stderr, "usage: xid_helper --offset | DEV CODE MSG [COUNT]\n");
        return 2;
    }
    const auto code = static_cast<unsigned>(std::strtoul(argv[2], nullptr, 0));
    const long count = argc == 5 ? std::strtol(argv[4], nullptr, 10) : 1;
    for (long i = 0; i < count; ++i) {
        emit_xid(argv[1], code, argv[3]);
    }
    return 0;
}
