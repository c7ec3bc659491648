// The GPU XID witness (lib/host/xid_watch.hpp; docs/observability.md, "GPU
// errors as a witness (XID)"): the trace_pipe line parser in every form the
// event takes, the watch against a stand-in of nvidia:nvidia_dev_xid in the
// real tracefs, the absent cases, and what XIDs do to the verdict.
//
// The stand-in: a uprobe event defined in the `nvidia` group with the
// tracepoint's name, on xid_helper's emit_xid(dev, error_code, msg), with
// fields of the tracepoint's names and kinds (two strings and a u32; the
// driver's TRACE_EVENT is quoted in lib/host/xid_watch.hpp). Uprobe event
// syntax: the kernel's Documentation/trace/uprobetracer.rst ("p[:[GRP/]EVENT]
// PATH:OFFSET [FETCHARGS]", +0(%di):string dereferences a register).
//
// These tests need root and tracefs with uprobe events (CI runs as root):
// without them they FAIL with one line saying why; never skipped. ctest runs
// them one at a time (RESOURCE_LOCK): the stand-in is one name in one kernel.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "frames.hpp"
#include "lib/host/xid_watch.hpp"
#include "lib/ledger/report.hpp"
#include "lib/run/gpu_path.hpp"

namespace ibvcap {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// ------------------------------------------------------------- the parser

// The driver's event as its format file has it (TP_STRUCT__entry of
// nv-tracepoint.h: __string(dev), __field(u32, error_code), __string(msg)).
constexpr const char* kDriverFormat =
    "name: nvidia_dev_xid\n"
    "ID: 1234\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:__data_loc char[] dev;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:u32 error_code;\toffset:12;\tsize:4;\tsigned:0;\n"
    "\tfield:__data_loc char[] msg;\toffset:16;\tsize:4;\tsigned:0;\n"
    "\n"
    "print fmt: \"Xid (PCI:%s): %u, %s\", __get_str(dev), REC->error_code, __get_str(msg)\n";

const std::vector<std::string> kDriverFields = {"dev", "error_code", "msg"};
const std::vector<std::string> kUprobeFields = {"__probe_ip", "dev", "error_code", "msg"};

TEST(XidParse, FormatFieldsAreTheEventsOwnInOrder) {
    EXPECT_EQ(format_fields(kDriverFormat), kDriverFields);
    EXPECT_EQ(format_fields("\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:1;\n"),
              std::vector<std::string>{"comm"});
    EXPECT_TRUE(format_fields("").empty());
}

// Every way an Xid line reaches trace_pipe, and what it must parse to.
struct XidLineCase {
    const char* name;
    const char* line;
    const std::vector<std::string>* fields;
    const char* device;
    std::uint32_t code;
    const char* message;
    std::int64_t trace_ns;
};

const XidLineCase kXidLines[] = {
    // TP_printk("Xid (PCI:%s): %u, %s", ...); the message has commas and '='.
    {"the driver's print format",
     "     kworker/3:1-1234    [003] d..1. 15961.740208: nvidia_dev_xid: Xid "
     "(PCI:0000:3b:00.0): 79, pid=4242, name=python3, GPU has fallen off the bus.",
     &kDriverFields, "0000:3b:00.0", 79, "pid=4242, name=python3, GPU has fallen off the bus.",
     15961740208000},
    // kernel/trace/trace_output.c print_fields: " name=value", a u32 as "0x%x (%d)".
    {"the fields option",
     "  <idle>-0 [000] d.h1. 7.000001: nvidia_dev_xid: dev=0000:af:00.0 error_code=0x4f (79) "
     "msg=pid=7, name=a b, Ch 00000010, errorString CTX SWITCH TIMEOUT",
     &kDriverFields, "0000:af:00.0", 79,
     "pid=7, name=a b, Ch 00000010, errorString CTX SWITCH TIMEOUT", 7000001000},
    // The first kernels with the option printed the fields last to first:
    // 80a76994b2d8 ("tracing: Add "fields" option ...") walked the field list
    // with list_for_each_entry, turned into list_for_each_entry_reverse by
    // the fix that names it (lore: 20230525085232.5096-1-sunliming@kylinos.cn).
    {"the fields option reversed",
     "  a-1 [000] ..... 12.5: nvidia_dev_xid: msg=Graphics SM Warp Exception "
     "error_code=0xd (13) dev=0000:3b:00.0",
     &kDriverFields, "0000:3b:00.0", 13, "Graphics SM Warp Exception", 12500000000},
    // The uprobe stand-in's print format "(%lx) dev=\"%s\" error_code=%u msg=\"%s\"" ...
    {"the uprobe stand-in",
     "   xid_helper-16124   [001] DBZff 15961.740208: nvidia_dev_xid: (0x55e5a9fcc1d0) "
     "dev=\"0000:3b:00.0\" error_code=79 msg=\"GPU has fallen off the bus.\"",
     &kUprobeFields, "0000:3b:00.0", 79, "GPU has fallen off the bus.", 15961740208000},
    // ... and with the fields option (its __probe_ip field first).
    {"the uprobe stand-in with the fields option",
     "   xid_helper-16129   [000] DBZff 15962.769483: nvidia_dev_xid: "
     "__probe_ip=0x5621498971d0 (94700967653840) dev=0000:3b:00.0 error_code=0x4f (79) "
     "msg=GPU has fallen off the bus.",
     &kUprobeFields, "0000:3b:00.0", 79, "GPU has fallen off the bus.", 15962769483000},
};

TEST(XidParse, EveryWayTheLineIsPrinted) {
    for (const XidLineCase& c : kXidLines) {
        SCOPED_TRACE(c.name);
        const auto x = parse_xid_line(c.line, *c.fields);
        ASSERT_TRUE(x);
        EXPECT_EQ(x->device, c.device);
        EXPECT_EQ(x->code, c.code);
        EXPECT_EQ(x->message, c.message);
        EXPECT_EQ(x->trace_ns, c.trace_ns);
    }
}

TEST(XidParse, OtherLinesAreNotXids) {
    EXPECT_FALSE(parse_xid_line("  a-1 [000] ..... 1.0: sched_switch: prev_comm=a", {}));
    EXPECT_FALSE(
        parse_xid_line("  a-1 [000] ..... 1.0: nvidia_dev_xid: Xid (PCI:0000:3b:00.0", {}));
    EXPECT_FALSE(parse_xid_line("  a-1 [000] ..... 1.0: nvidia_dev_xid: dev=x msg=y", {}));
    EXPECT_FALSE(
        parse_xid_line("  a-1 [000] ..... 1.0: nvidia_dev_xid: dev= error_code=1 msg=y", {}));
    EXPECT_FALSE(parse_xid_line("", {}));
    // A timestamp that cannot be read leaves the event, without its time.
    const auto x = parse_xid_line("nvidia_dev_xid: Xid (PCI:0000:3b:00.0): 48, DBE", {});
    EXPECT_FALSE(x) << "no ': nvidia_dev_xid:' marker";
    const auto y = parse_xid_line("a [0] . x: nvidia_dev_xid: Xid (PCI:0000:3b:00.0): 48, DBE", {});
    ASSERT_TRUE(y);
    EXPECT_EQ(y->trace_ns, -1);
    EXPECT_EQ(y->code, 48u);
    EXPECT_EQ(y->message, "DBE");
}

TEST(XidParse, LostEvents) {
    EXPECT_EQ(parse_lost_line("CPU:3 [LOST 12 EVENTS]"), 12u);
    EXPECT_FALSE(parse_lost_line("  a-1 [000] ..... 1.0: nvidia_dev_xid: msg=[LOST 1 EVENTS]"));
    EXPECT_FALSE(parse_lost_line("CPU:3 something"));
}

// ------------------------------------------------- the verdict and the report

GpuXid xid(std::string device, std::uint32_t code, std::string message, bool capture_gpu) {
    GpuXid x;
    x.time_ns = 1'795'000'000'123'456'789;  // 2026-11-18T11:06:40.123456789Z
    x.device = std::move(device);
    x.code = code;
    x.message = std::move(message);
    x.capture_gpu = capture_gpu;
    return x;
}

TEST(XidVerdict, AnXidOnTheCaptureGpuIsLossNamedInTheReasons) {
    Ledger ledger;
    ledger.add_gpu_xid(xid("0000:3b:00.0", 79, "GPU has fallen off the bus.", true));
    const auto why = ledger.loss_reasons();
    const std::string expected =
        "GPU 0000:3b:00.0 reported Xid 79: GPU has fallen off the bus. at " +
        format_utc_time(1'795'000'000'123'456'789);
    EXPECT_NE(std::find(why.begin(), why.end(), expected), why.end())
        << ::testing::PrintToString(why);
    EXPECT_FALSE(ledger.zero_loss());
    EXPECT_EQ(format_utc_time(1'795'000'000'123'456'789), "2026-11-18T11:06:40.123456Z");
}

TEST(XidVerdict, AnXidOnAnotherGpuIsNoReason) {
    Ledger ledger;
    ledger.add_gpu_xid(xid("0000:af:00.0", 13, "Graphics SM Warp Exception", false));
    for (const auto& r : ledger.loss_reasons()) {
        EXPECT_EQ(r.find("Xid"), std::string::npos) << r;
    }
}

TEST(XidVerdict, LostXidEventsAreLoss) {
    Ledger ledger;
    ledger.add_gpu_xids_lost(3);
    const auto why = ledger.loss_reasons();
    EXPECT_NE(std::find(why.begin(), why.end(),
                        "3 GPU XID events were lost by the trace buffer (any could be the "
                        "capture GPU's)"),
              why.end())
        << ::testing::PrintToString(why);
}

TEST(XidVerdict, MergedLedgersKeepTheirXids) {
    Ledger a;
    Ledger b;
    b.add_gpu_xid(xid("0000:3b:00.0", 79, "m", true));
    b.add_gpu_xids_lost(2);
    a.merge(b);
    ASSERT_EQ(a.gpu_xids().size(), 1u);
    EXPECT_EQ(a.gpu_xids_lost(), 2u);
}

TEST(XidVerdict, TheReportListsEveryXid) {
    Ledger ledger;
    ledger.add_gpu_xid(xid("0000:3b:00.0", 79, "GPU has fallen off the bus.", true));
    ledger.add_gpu_xid(xid("0000:af:00.0", 13, "SM", false));
    const auto j = report_json(ledger, RunInfo{});
    ASSERT_TRUE(j.contains("gpu_xids"));
    ASSERT_EQ(j["gpu_xids"].size(), 2u);
    const auto& x = j["gpu_xids"][0];
    EXPECT_EQ(x["time"], "2026-11-18T11:06:40.123456Z");
    EXPECT_EQ(x["time_ns"], 1'795'000'000'123'456'789);
    EXPECT_EQ(x["device"], "0000:3b:00.0");
    EXPECT_EQ(x["code"], 79);
    EXPECT_EQ(x["message"], "GPU has fallen off the bus.");
    EXPECT_EQ(x["capture_gpu"], true);
    EXPECT_EQ(j["gpu_xids"][1]["capture_gpu"], false);
    EXPECT_EQ(report_json(Ledger{}, RunInfo{})["gpu_xids"], nlohmann::json::array());
}

// ---------------------------------------------------------- absent witnesses

TEST(XidAbsent, NoTracefsAtTheRoot) {
    test::TempDir dir;  // an empty directory: no tracefs mounted there
    XidWatch w({dir.path(), "0000:3b:00.0"});
    EXPECT_FALSE(w.start());
    EXPECT_FALSE(w.watching());
    EXPECT_EQ(w.absent(), fmt::format("no tracefs at {0} (mount it: mount -t tracefs nodev {0})",
                                      dir.path().string()));
}

// Not a tracefs, and a tracefs this user may not read: the cause, and the
// fix only where it is one (root).
TEST(XidAbsent, AnUnreadableTracefsSaysWhy) {
    test::TempDir dir;
    const fs::path file = dir.path() / "file";
    std::ofstream(file) << "x";
    XidWatch not_dir({file, ""});
    EXPECT_FALSE(not_dir.start());
    EXPECT_EQ(not_dir.absent(),
              fmt::format("cannot read tracefs at {}: Not a directory", file.string()));

    fs::create_directories(dir.path() / "tracefs/events");
    fs::permissions(dir.path() / "tracefs", fs::perms::owner_all);  // 0700: TRACEFS_DEFAULT_MODE
    ::chmod(dir.path().c_str(), 0755);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) {
            std::_Exit(2);
        }
        XidWatch w({dir.path() / "tracefs", ""});
        const std::string want = fmt::format(
            "cannot read tracefs at {}/tracefs: Permission denied (the XID watch needs root)",
            dir.path().string());
        std::_Exit(!w.start() && w.absent() == want ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "2: cannot drop to nobody (needs root); 1: other line";
}

TEST(XidAbsent, NoNvidiaGroup) {
    // A tracefs without the nvidia group (the real one's case: e2e gpu_xid).
    test::TempDir dir;
    fs::create_directories(dir.path() / "events/sched");
    XidWatch w({dir.path(), ""});
    EXPECT_FALSE(w.start());
    EXPECT_EQ(w.absent(),
              fmt::format("no tracepoint nvidia:nvidia_dev_xid in {}/events (the NVIDIA kernel "
                          "module is not loaded, or its version has no such tracepoint)",
                          dir.path().string()));
    EXPECT_TRUE(fs::is_empty(dir.path() / "events/sched")) << "nothing made in tracefs";
    EXPECT_FALSE(fs::exists(dir.path() / "instances"));
}

// ------------------------------------------------- the stand-in in tracefs

constexpr const char* kTracefs = "/sys/kernel/tracing";

// 0 or errno: one write to a tracefs file, appending.
int append(const fs::path& file, const std::string& line) {
    const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) {
        return errno;
    }
    const ssize_t n = ::write(fd, line.data(), line.size());
    const int err = n < 0 ? errno : 0;
    ::close(fd);
    return err;
}

// Runs argv; its exit status (-1 when it could not run) and stdout.
std::pair<int, std::string> run(const std::vector<std::string>& argv) {
    std::string cmd;
    for (const auto& a : argv) {
        cmd += "'" + a + "' ";
    }
    std::FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) {
        return {-1, ""};
    }
    std::string out;
    char buf[256];
    while (std::fgets(buf, sizeof buf, p) != nullptr) {
        out += buf;
    }
    const int status = ::pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

#if defined(__x86_64__)
constexpr const char* kArg1 = "%di";
constexpr const char* kArg2 = "%si";
constexpr const char* kArg3 = "%dx";
#elif defined(__aarch64__)
constexpr const char* kArg1 = "%x0";
constexpr const char* kArg2 = "%x1";
constexpr const char* kArg3 = "%x2";
#else
#error "the XID stand-in knows the argument registers of x86-64 and arm64 only"
#endif

// Defines the stand-in nvidia:nvidia_dev_xid for the test and removes it
// afterwards, also when the test failed.
class XidStandIn : public ::testing::Test {
  protected:
    void SetUp() override {
        struct statfs sfs {};
        if (::statfs(kTracefs, &sfs) != 0 || sfs.f_type != 0x74726163 /* TRACEFS_MAGIC */) {
            if (::mount("nodev", kTracefs, "tracefs", 0, nullptr) != 0) {
                GTEST_FAIL() << "cannot mount tracefs at " << kTracefs << ": "
                             << std::strerror(errno) << " (these tests need root)";
            }
        }
        remove_standin();  // one an earlier, killed run left
        if (fs::exists(fs::path(kTracefs) / "events/nvidia/nvidia_dev_xid")) {
            GTEST_FAIL() << "this host has the NVIDIA driver's own nvidia:nvidia_dev_xid: the "
                            "stand-in cannot be defined here (run these tests on a host without "
                            "the nvidia module)";
        }
        const auto [rc, out] = run({XID_HELPER, "--offset"});
        if (rc != 0 || out.empty()) {
            GTEST_FAIL() << "cannot run " << XID_HELPER << " --offset";
        }
        const std::string offset = out.substr(0, out.find('\n'));
        const std::string def = fmt::format(
            "p:nvidia/nvidia_dev_xid {}:{} dev=+0({}):string error_code={}:u32 "
            "msg=+0({}):string\n",
            XID_HELPER, offset, kArg1, kArg2, kArg3);
        if (const int err = append(fs::path(kTracefs) / "uprobe_events", def)) {
            GTEST_FAIL() << "cannot define the uprobe stand-in in " << kTracefs
                         << "/uprobe_events: " << std::strerror(err)
                         << " (needs root and a kernel with CONFIG_UPROBE_EVENTS)";
        }
        defined_ = true;
    }

    void TearDown() override {
        if (defined_) {
            EXPECT_EQ(remove_standin(), 0) << "the stand-in could not be removed";
        }
        EXPECT_TRUE(own_instances().empty()) << "a trace instance of this process is left";
    }

    // 0 or errno. An instance left with the event enabled keeps it busy.
    static int remove_standin() {
        int err = append(fs::path(kTracefs) / "uprobe_events", "-:nvidia/nvidia_dev_xid\n");
        if (err == EBUSY) {
            for (const auto& i : own_instances()) {
                (void)append(i / "events/nvidia/nvidia_dev_xid/enable", "0");
                ::rmdir(i.c_str());
            }
            err = append(fs::path(kTracefs) / "uprobe_events", "-:nvidia/nvidia_dev_xid\n");
        }
        return err == ENOENT ? 0 : err;
    }

    static std::vector<fs::path> own_instances() {
        std::vector<fs::path> found;
        std::error_code ec;
        const std::string prefix = fmt::format("ibvcap-{}-", ::getpid());
        for (const auto& e : fs::directory_iterator(fs::path(kTracefs) / "instances", ec)) {
            if (e.path().filename().string().starts_with(prefix)) {
                found.push_back(e.path());
            }
        }
        return found;
    }

    static void emit(const std::string& dev, unsigned code, const std::string& msg, int count = 1) {
        const auto [rc, out] =
            run({XID_HELPER, dev, std::to_string(code), msg, std::to_string(count)});
        ASSERT_EQ(rc, 0) << "xid_helper failed: " << out;
    }

    // Until `n` events are seen (false after 5 s).
    static bool wait_for(const XidWatch& w, std::size_t n) {
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (w.events().size() < n) {
            if (std::chrono::steady_clock::now() > until) {
                return false;
            }
            std::this_thread::sleep_for(5ms);
        }
        return true;
    }

    static std::int64_t realtime_ns() {
        timespec ts{};
        ::clock_gettime(CLOCK_REALTIME, &ts);
        return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    }

    bool defined_ = false;
};

TEST_F(XidStandIn, EveryXidComesOutExactly) {
    emit("0000:3b:00.0", 31, "before the watch");  // not seen: the instance starts empty
    XidWatch w({kTracefs, "0000:3b:00.0"});
    ASSERT_TRUE(w.start()) << w.absent();
    const fs::path instance = w.instance();
    ASSERT_TRUE(fs::is_directory(instance));
    EXPECT_TRUE(instance.filename().string().starts_with(fmt::format("ibvcap-{}-", ::getpid())));
    if (fs::exists(fs::path(kTracefs) / "options/fields")) {
        EXPECT_EQ(w.output_form(), "fields");
    }
    const std::int64_t before = realtime_ns();
    emit("0000:3b:00.0", 79, "GPU has fallen off the bus.", 3);
    emit("0000:af:00.0", 13, "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): pid=7, name=x");
    ASSERT_TRUE(wait_for(w, 4)) << w.events().size() << " events";
    const std::int64_t after = realtime_ns();
    EXPECT_EQ(w.on_capture_gpu(), 3u);
    w.stop();
    EXPECT_FALSE(fs::exists(instance)) << "the instance is removed at stop";
    EXPECT_EQ(w.failure(), "");
    EXPECT_EQ(w.lost(), 0u);

    const auto events = w.events();
    ASSERT_EQ(events.size(), 4u);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(events[i].device, "0000:3b:00.0");
        EXPECT_EQ(events[i].code, 79u);
        EXPECT_EQ(events[i].message, "GPU has fallen off the bus.");
        EXPECT_TRUE(events[i].capture_gpu);
    }
    EXPECT_EQ(events[3].device, "0000:af:00.0");
    EXPECT_EQ(events[3].code, 13u);
    EXPECT_EQ(events[3].message,
              "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): pid=7, name=x");
    EXPECT_FALSE(events[3].capture_gpu);
    for (const auto& e : events) {
        // The trace clock (CLOCK_BOOTTIME, µs) moved onto CLOCK_REALTIME.
        EXPECT_GE(e.time_ns, before - 2'000'000) << format_utc_time(e.time_ns);
        EXPECT_LE(e.time_ns, after + 2'000'000) << format_utc_time(e.time_ns);
    }
}

TEST_F(XidStandIn, ThePrintFormatToo) {
    // A kernel without the "fields" option prints the event's own format.
    XidWatch w({kTracefs, "0000:3b:00.0"});
    ASSERT_TRUE(w.start()) << w.absent();
    if (fs::exists(w.instance() / "options/fields")) {
        ASSERT_EQ(append(w.instance() / "options/fields", "0"), 0);
    }
    emit("0000:3b:00.0", 48, "An uncorrectable double bit error (DBE) has been detected");
    ASSERT_TRUE(wait_for(w, 1));
    w.stop();
    const auto events = w.events();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].device, "0000:3b:00.0");
    EXPECT_EQ(events[0].code, 48u);
    EXPECT_EQ(events[0].message, "An uncorrectable double bit error (DBE) has been detected");
}

TEST_F(XidStandIn, StopIsPromptAndReadsWhatIsLeft) {
    XidWatch w({kTracefs, ""});
    ASSERT_TRUE(w.start()) << w.absent();
    emit("0000:3b:00.0", 94, "Contained ECC error");
    const auto t0 = std::chrono::steady_clock::now();
    w.stop();  // at once: the event is read before the reader ends
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
    ASSERT_EQ(w.events().size(), 1u);
    EXPECT_EQ(w.events()[0].code, 94u);
    EXPECT_FALSE(w.events()[0].capture_gpu) << "no capture GPU given";
    EXPECT_EQ(w.on_capture_gpu(), 0u);
}

TEST_F(XidStandIn, TheRunsWitnessCountsTheCaptureGpusXids) {
    // GpuPath with the stand-in GPU at 0000:3b:00.0 (spelt as CUDA does).
    GpuRequest request;
    request.mode = GpuRequest::Mode::standin;
    request.standin_pci = "00000000:3B:00.0";
    request.tracefs_root = kTracefs;
    GpuPath gpu(request, "");
    RunSettings settings;
    gpu.watch_xids(settings);
    ASSERT_EQ(settings.witnesses.size(), 1u);
    emit("0000:3b:00.0", 79, "GPU has fallen off the bus.");
    emit("0000:af:00.0", 13, "elsewhere");
    std::vector<SourceCounter> seen;
    const auto until = std::chrono::steady_clock::now() + 5s;
    do {
        std::this_thread::sleep_for(5ms);
        seen = settings.witnesses.front()();
    } while (seen.size() == 1 && seen[0].value < 1 && std::chrono::steady_clock::now() < until);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].name, "gpu/xid");
    EXPECT_EQ(seen[0].value, 1u);
    EXPECT_FALSE(seen[0].is_drop);
    EXPECT_EQ(seen[0].cause, LossCause::gpu_xid);

    RunOutcome outcome;
    outcome.info.source = "pcap";
    gpu.finish(outcome);
    EXPECT_EQ(outcome.exit_code, kExitLoss);
    ASSERT_EQ(outcome.ledger.gpu_xids().size(), 2u);
    const auto why = outcome.ledger.loss_reasons();
    const auto it = std::find_if(why.begin(), why.end(), [](const std::string& r) {
        return r.starts_with("GPU 0000:3b:00.0 reported Xid 79: GPU has fallen off the bus. at ");
    });
    EXPECT_NE(it, why.end()) << ::testing::PrintToString(why);
    const auto& notes = outcome.ledger.notes();
    EXPECT_NE(std::find_if(notes.begin(), notes.end(),
                           [](const std::string& n) {
                               return n.starts_with(
                                   "GPU 0000:af:00.0 (not the capture's) reported Xid 13: "
                                   "elsewhere at ");
                           }),
              notes.end())
        << ::testing::PrintToString(notes);
}

TEST(XidAbsent, TheGpuPathNotesAnAbsentWitnessAndGoesOn) {
    test::TempDir dir;
    GpuRequest request;
    request.mode = GpuRequest::Mode::standin;
    request.standin_pci = "0000:3b:00.0";
    request.tracefs_root = dir.path();
    GpuPath gpu(request, "");
    RunSettings settings;
    gpu.watch_xids(settings);
    EXPECT_TRUE(settings.witnesses.empty()) << "no witness without the watch";
    RunOutcome outcome;
    outcome.info.source = "pcap";
    gpu.finish(outcome);
    const auto& notes = outcome.ledger.notes();
    EXPECT_NE(std::find(notes.begin(), notes.end(),
                        fmt::format("GPU XID witness absent: no tracefs at {0} (mount it: mount "
                                    "-t tracefs nodev {0})",
                                    dir.path().string())),
              notes.end())
        << ::testing::PrintToString(notes);
}

TEST(XidAbsent, ABadStandInAddressIsOneLine) {
    GpuRequest request;
    request.mode = GpuRequest::Mode::standin;
    request.standin_pci = "3b:00";
    try {
        GpuPath gpu(request, "");
        FAIL() << "expected an error";
    } catch (const std::invalid_argument& e) {
        EXPECT_STREQ(e.what(),
                     "bad stand-in GPU PCI address '3b:00': expected "
                     "DOMAIN:BUS:DEVICE.FUNCTION, e.g. 0000:3b:00.0");
    }
}

}  // namespace
}  // namespace ibvcap
