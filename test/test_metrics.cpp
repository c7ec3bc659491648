// The metrics file (docs/observability.md, "Metrics"): the text of the
// Prometheus exposition format 0.0.4, its escaping, the one-step rewrite a
// reader never sees half of, and the paths refused before a run.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "frames.hpp"
#include "lib/core/netaddr.hpp"
#include "lib/run/metrics.hpp"

namespace ibvcap {
namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A small run: one stream, two witnesses, a writer, no held slots.
MetricsInput small_input() {
    MetricsInput in;
    in.command = "capture";
    in.source = "pcap";
    in.input = "eth0";
    in.run = "ibvcap";
    in.packets = 12;
    in.bytes = 1200;
    in.reasons[static_cast<std::size_t>(Reason::not_udp)] = 2;
    in.reasons[static_cast<std::size_t>(Reason::truncated_udp)] = 1;
    LiveStream s;
    s.group = parse_group("239.17.0.1:36001");
    s.antenna = *parse_ipv4("10.0.0.11");
    s.thread = 0;
    s.packets = 9;
    s.bytes = 900;
    s.missing = 3;
    s.duplicates = 1;
    s.out_of_order = 2;
    in.streams.push_back(s);
    in.witnesses = {{"mlx5_0/hw_counters/out_of_buffer", 3, true, LossCause::receive_queue},
                    {"pcap/ps_recv", 12, false, LossCause::none}};
    in.lost_by_cause[static_cast<std::size_t>(LossCause::receive_queue)] = 3;
    in.writer_backlog_bytes = 4096;
    in.zero_loss = false;
    in.start_time_s = 1700000000.5;
    in.update_time_s = 1700000010.25;
    in.duration_s = 9.75;
    in.write_failures = 1;
    return in;
}

TEST(MetricsFormat, ExactTextForASmallRun) {
    const std::string expected =
        R"(# HELP ibvcap_up 1 while the run goes on, 0 in the file written at its end.
# TYPE ibvcap_up gauge
ibvcap_up{run="ibvcap"} 1
# HELP ibvcap_zero_loss 1 while no frame was lost so far (the final file: the verdict is zero-loss), 0 once one was.
# TYPE ibvcap_zero_loss gauge
ibvcap_zero_loss{run="ibvcap"} 0
# HELP ibvcap_start_time_seconds When the run started, seconds since the epoch.
# TYPE ibvcap_start_time_seconds gauge
ibvcap_start_time_seconds{run="ibvcap"} 1700000000.5
# HELP ibvcap_last_update_time_seconds When this file was written, seconds since the epoch.
# TYPE ibvcap_last_update_time_seconds gauge
ibvcap_last_update_time_seconds{run="ibvcap"} 1700000010.25
# HELP ibvcap_duration_seconds Seconds since the run started.
# TYPE ibvcap_duration_seconds gauge
ibvcap_duration_seconds{run="ibvcap"} 9.75
# HELP ibvcap_run_info The run: command, source and input (the interface or the file). Always 1.
# TYPE ibvcap_run_info gauge
ibvcap_run_info{run="ibvcap",command="capture",source="pcap",input="eth0"} 1
# HELP ibvcap_packets_total Frames the source delivered to ibvcap, every kind.
# TYPE ibvcap_packets_total counter
ibvcap_packets_total{run="ibvcap"} 12
# HELP ibvcap_bytes_total Wire bytes of the frames the source delivered.
# TYPE ibvcap_bytes_total counter
ibvcap_bytes_total{run="ibvcap"} 1200
# HELP ibvcap_rejected_frames_total Frames that are not frames of a stream, by reason; class malformed makes the verdict loss, non_codif does not.
# TYPE ibvcap_rejected_frames_total counter
ibvcap_rejected_frames_total{run="ibvcap",reason="not_ipv4",class="non_codif"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="not_udp",class="non_codif"} 2
ibvcap_rejected_frames_total{run="ibvcap",reason="other_destination",class="non_codif"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="unlisted_source",class="non_codif"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="not_codif",class="non_codif"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="not_vdif",class="non_codif"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="before_window",class="non_codif"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="after_window",class="non_codif"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="truncated_capture",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="truncated_ethernet",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="too_many_vlans",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="truncated_ipv4",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="bad_ip_version",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="bad_ip_header_length",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="bad_ip_total_length",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="ip_fragment",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="truncated_udp",class="malformed"} 1
ibvcap_rejected_frames_total{run="ibvcap",reason="bad_udp_length",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="headers_split",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="codif_zero_field",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="codif_bad_length",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="codif_bad_samples",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="codif_frame_beyond_period",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="codif_no_frames_per_period",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="vdif_zero_length",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="vdif_bad_length",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="vdif_frame_beyond_rate",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="layout_changed",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="frame_length_changed",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="epoch_changed",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="stream_params_changed",class="malformed"} 0
ibvcap_rejected_frames_total{run="ibvcap",reason="too_many_streams",class="malformed"} 0
# HELP ibvcap_stream_packets_total Frames of the stream received, duplicates included.
# TYPE ibvcap_stream_packets_total counter
ibvcap_stream_packets_total{run="ibvcap",group="239.17.0.1:36001",antenna="10.0.0.11",thread="0"} 9
# HELP ibvcap_stream_bytes_total Wire bytes of the stream's frames.
# TYPE ibvcap_stream_bytes_total counter
ibvcap_stream_bytes_total{run="ibvcap",group="239.17.0.1:36001",antenna="10.0.0.11",thread="0"} 900
# HELP ibvcap_stream_missing_frames_total Frames of the stream that never arrived (gaps).
# TYPE ibvcap_stream_missing_frames_total counter
ibvcap_stream_missing_frames_total{run="ibvcap",group="239.17.0.1:36001",antenna="10.0.0.11",thread="0"} 3
# HELP ibvcap_stream_duplicate_frames_total Frames of the stream received more than once.
# TYPE ibvcap_stream_duplicate_frames_total counter
ibvcap_stream_duplicate_frames_total{run="ibvcap",group="239.17.0.1:36001",antenna="10.0.0.11",thread="0"} 1
# HELP ibvcap_stream_out_of_order_frames_total Frames of the stream that arrived after a later one (they fill a gap).
# TYPE ibvcap_stream_out_of_order_frames_total counter
ibvcap_stream_out_of_order_frames_total{run="ibvcap",group="239.17.0.1:36001",antenna="10.0.0.11",thread="0"} 2
# HELP ibvcap_stream_too_late_frames_total Frames of the stream that arrived too late to place.
# TYPE ibvcap_stream_too_late_frames_total counter
ibvcap_stream_too_late_frames_total{run="ibvcap",group="239.17.0.1:36001",antenna="10.0.0.11",thread="0"} 0
# HELP ibvcap_stream_implausible_frames_total Frames of the stream too far from it to place (a corrupt header).
# TYPE ibvcap_stream_implausible_frames_total counter
ibvcap_stream_implausible_frames_total{run="ibvcap",group="239.17.0.1:36001",antenna="10.0.0.11",thread="0"} 0
# HELP ibvcap_stream_restarts_total Times the stream was re-synchronised at a new position.
# TYPE ibvcap_stream_restarts_total counter
ibvcap_stream_restarts_total{run="ibvcap",group="239.17.0.1:36001",antenna="10.0.0.11",thread="0"} 0
# HELP ibvcap_witness_total The witnesses' growth since the run started: NIC, port and kernel counters, completion errors, recoveries, port events, writer drops. name is where it was read, cause the loss its growth stands for, drop true for counts of frames lost before ibvcap.
# TYPE ibvcap_witness_total counter
ibvcap_witness_total{run="ibvcap",name="mlx5_0/hw_counters/out_of_buffer",cause="receive_queue",drop="true"} 3
ibvcap_witness_total{run="ibvcap",name="pcap/ps_recv",cause="none",drop="false"} 12
# HELP ibvcap_lost_frames_total Frames lost, by cause: missing frames by the witness that moved when their gap opened (upstream when none did), records not written (writer), and frames a PSRDADA ring had no room for (consumer).
# TYPE ibvcap_lost_frames_total counter
ibvcap_lost_frames_total{run="ibvcap",cause="port_discards"} 0
ibvcap_lost_frames_total{run="ibvcap",cause="receive_queue"} 3
ibvcap_lost_frames_total{run="ibvcap",cause="ring_hold_limit"} 0
ibvcap_lost_frames_total{run="ibvcap",cause="completion_errors"} 0
ibvcap_lost_frames_total{run="ibvcap",cause="port_down"} 0
ibvcap_lost_frames_total{run="ibvcap",cause="gpu_xid"} 0
ibvcap_lost_frames_total{run="ibvcap",cause="kernel"} 0
ibvcap_lost_frames_total{run="ibvcap",cause="writer"} 0
ibvcap_lost_frames_total{run="ibvcap",cause="consumer"} 0
ibvcap_lost_frames_total{run="ibvcap",cause="upstream"} 0
# HELP ibvcap_writer_backlog_bytes Bytes queued for the disk, not yet written.
# TYPE ibvcap_writer_backlog_bytes gauge
ibvcap_writer_backlog_bytes{run="ibvcap"} 4096
# HELP ibvcap_metrics_write_failures_total Writes of this file that failed before this one.
# TYPE ibvcap_metrics_write_failures_total counter
ibvcap_metrics_write_failures_total{run="ibvcap"} 1
)";
    EXPECT_EQ(format_metrics(small_input()), expected);
}

// Runs side by side in one textfile directory write files of different
// names: their series differ by the run label, so node_exporter never sees
// the same series twice.
TEST(MetricsFormat, TheRunLabelIsTheFileNameWithoutProm) {
    EXPECT_EQ(run_label("/var/lib/node_exporter/ibvcap-eth1.prom"), "ibvcap-eth1");
    EXPECT_EQ(run_label("m.prom"), "m");
    EXPECT_EQ(run_label("dir/metrics.txt"), "metrics.txt");
    EXPECT_EQ(run_label(".prom"), ".prom");
    MetricsInput in = small_input();
    in.run.clear();
    const std::string text = format_metrics(in);
    EXPECT_NE(text.find("\nibvcap_up 1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("\nibvcap_stream_packets_total{group="), std::string::npos) << text;
}

TEST(MetricsFormat, HeldSlotsOnlyWhenTheSourceHoldsSlots) {
    MetricsInput in = small_input();
    EXPECT_EQ(format_metrics(in).find("ibvcap_held_slots"), std::string::npos);
    in.slots_held = 17;
    in.writer_backlog_bytes.reset();
    const std::string text = format_metrics(in);
    EXPECT_NE(text.find("# TYPE ibvcap_held_slots gauge\nibvcap_held_slots{run=\"ibvcap\"} 17\n"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("ibvcap_writer_backlog_bytes"), std::string::npos);
}

// The writers' bound beside their backlog, so that an alert and a dashboard
// can judge the backlog against the run's own --writer-memory.
TEST(MetricsFormat, TheWritersBoundOnlyWhenThereIsOne) {
    MetricsInput in = small_input();
    EXPECT_EQ(format_metrics(in).find("ibvcap_writer_memory_bound_bytes"), std::string::npos);
    in.writer_bound_bytes = 0;  // no bound
    EXPECT_EQ(format_metrics(in).find("ibvcap_writer_memory_bound_bytes"), std::string::npos);
    in.writer_bound_bytes = std::uint64_t{1} << 30;
    const std::string text = format_metrics(in);
    EXPECT_NE(text.find("# TYPE ibvcap_writer_memory_bound_bytes gauge\n"
                        "ibvcap_writer_memory_bound_bytes{run=\"ibvcap\"} 1073741824\n"),
              std::string::npos)
        << text;
}

TEST(MetricsFormat, LabelValuesAreEscaped) {
    EXPECT_EQ(escape_label_value("plain/name_0"), "plain/name_0");
    EXPECT_EQ(escape_label_value(R"(a\b)"), R"(a\\b)");
    EXPECT_EQ(escape_label_value(R"(say "hi")"), R"(say \"hi\")");
    EXPECT_EQ(escape_label_value("two\nlines"), R"(two\nlines)");
    EXPECT_EQ(escape_label_value("\\\"\n"), R"(\\\"\n)");
    MetricsInput in = small_input();
    in.input = "/data/x \"1\".pcap";
    in.witnesses = {{"dev\\odd\n\"name\"", 5, false, LossCause::kernel}};
    in.run = "a\"b";
    const std::string text = format_metrics(in);
    EXPECT_NE(text.find(R"(input="/data/x \"1\".pcap"})"), std::string::npos) << text;
    EXPECT_NE(text.find(R"(ibvcap_up{run="a\"b"} 1)"), std::string::npos) << text;
    EXPECT_NE(
        text.find(
            R"(ibvcap_witness_total{run="a\"b",name="dev\\odd\n\"name\"",cause="kernel",drop="false"} 5)"),
        std::string::npos)
        << text;
}

// Each sample's family has its HELP and TYPE lines before it, each family
// appears once (its lines together), and no series repeats.
TEST(MetricsFormat, EveryFamilyHasHelpAndTypeAndAppearsOnce) {
    MetricsInput in = small_input();
    in.slots_held = 3;
    // The same stream on two lanes, and a witness read twice: one series each.
    in.streams.push_back(in.streams.front());
    in.witnesses.push_back(in.witnesses.front());
    const std::string text = format_metrics(in);
    std::istringstream lines(text);
    std::map<std::string, std::string> help;
    std::map<std::string, std::string> type;
    std::set<std::string> finished;
    std::set<std::string> series;
    std::string current;
    std::size_t samples = 0;
    for (std::string line; std::getline(lines, line);) {
        ASSERT_FALSE(line.empty());
        std::istringstream words(line);
        std::string first;
        std::string name;
        words >> first;
        if (first == "#") {
            std::string kind;
            words >> kind >> name;
            if (name != current) {
                ASSERT_EQ(finished.count(name), 0u) << "family " << name << " appears twice";
                if (!current.empty()) {
                    finished.insert(current);
                }
                current = name;
            }
            std::string rest;
            std::getline(words, rest);
            (kind == "HELP" ? help : type)[name] = rest;
            continue;
        }
        name = first.substr(0, first.find('{'));
        ASSERT_EQ(name, current) << "sample outside its family: " << line;
        ASSERT_FALSE(help[name].empty()) << name;
        ASSERT_TRUE(type[name] == " counter" || type[name] == " gauge") << name;
        EXPECT_EQ(name.ends_with("_total"), type[name] == " counter") << name;
        EXPECT_TRUE(name.starts_with("ibvcap_")) << name;
        EXPECT_TRUE(series.insert(first).second) << "series twice: " << first;
        ++samples;
    }
    EXPECT_EQ(help.size(), type.size());
    EXPECT_EQ(help.size(), 22u);  // every family, held slots and the backlog included
    EXPECT_GT(samples, 40u);
    // The duplicates were summed.
    EXPECT_NE(
        text.find(
            "ibvcap_stream_missing_frames_total{run=\"ibvcap\",group=\"239.17.0.1:36001\",antenna="
            "\"10.0.0.11\",thread=\"0\"} 6\n"),
        std::string::npos)
        << text;
    EXPECT_NE(text.find("cause=\"receive_queue\",drop=\"true\"} 6\n"), std::string::npos);
}

TEST(MetricsFormat, LossSoFar) {
    MetricsInput in;
    EXPECT_FALSE(loss_so_far(in));
    LiveStream s;
    s.packets = 10;
    s.duplicates = 2;
    s.out_of_order = 1;
    in.streams.push_back(s);
    in.reasons[static_cast<std::size_t>(Reason::not_codif)] = 5;  // not loss
    in.witnesses = {{"pcap/ps_recv", 10, false, LossCause::none},
                    {"mlx5_0/port_down_events", 1, false, LossCause::port_down}};
    EXPECT_FALSE(loss_so_far(in));
    {
        MetricsInput l = in;
        l.streams[0].missing = 1;
        EXPECT_TRUE(loss_so_far(l));
    }
    {
        MetricsInput l = in;
        l.streams[0].too_late = 1;
        EXPECT_TRUE(loss_so_far(l));
    }
    {
        MetricsInput l = in;
        l.streams[0].implausible = 1;
        EXPECT_TRUE(loss_so_far(l));
    }
    {
        MetricsInput l = in;
        l.streams[0].restarts = 1;
        EXPECT_TRUE(loss_so_far(l));
    }
    {
        MetricsInput l = in;
        l.reasons[static_cast<std::size_t>(Reason::bad_udp_length)] = 1;
        EXPECT_TRUE(loss_so_far(l));
    }
    {
        MetricsInput l = in;
        l.witnesses.push_back({"pcap/ps_drop", 1, true, LossCause::kernel});
        EXPECT_TRUE(loss_so_far(l));
    }
    {
        MetricsInput l = in;
        l.witnesses.push_back({"writer/dropped", 4, false, LossCause::writer});
        EXPECT_TRUE(loss_so_far(l));
    }
    {
        MetricsInput l = in;
        l.witnesses.push_back({"mlx5_0/wc_errors", 1, false, LossCause::completion_errors});
        EXPECT_TRUE(loss_so_far(l));
    }
    {
        MetricsInput l = in;
        l.witnesses.push_back({"gpu/xid", 1, false, LossCause::gpu_xid});
        EXPECT_TRUE(loss_so_far(l));
    }
    {
        MetricsInput l = in;
        l.lost_by_cause[static_cast<std::size_t>(LossCause::upstream)] = 1;
        EXPECT_TRUE(loss_so_far(l));
    }
}

// A reader that opens the file while it is rewritten again and again sees a
// whole version every time, never a part (the rewrite is a rename over it).
TEST(MetricsFile, AReaderNeverSeesAPartialFile) {
    test::TempDir dir;
    const std::string path = dir / "ibvcap.prom";
    MetricsFile file(path, 10, "capture", nullptr);
    // Versions of different lengths, each ending in a marker line.
    std::vector<std::string> versions;
    for (int i = 0; i < 4; ++i) {
        MetricsInput in = small_input();
        for (int s = 0; s < 50 * (i + 1); ++s) {
            LiveStream st = in.streams.front();
            st.thread = static_cast<std::uint16_t>(s);
            in.streams.push_back(st);
        }
        versions.push_back(format_metrics(in));
    }
    file.write(versions[0], MetricsFile::Clock::now());
    std::atomic<bool> done{false};
    std::atomic<int> reads{0};
    std::atomic<int> bad{0};
    std::thread reader([&] {
        while (!done.load()) {
            const std::string text = slurp(path);
            if (std::find(versions.begin(), versions.end(), text) == versions.end()) {
                ++bad;
            }
            ++reads;
        }
    });
    for (int i = 0; i < 400; ++i) {
        file.write(versions[static_cast<std::size_t>(i) % versions.size()],
                   MetricsFile::Clock::now());
    }
    while (reads.load() < 50) {
        std::this_thread::yield();
    }
    done = true;
    reader.join();
    EXPECT_EQ(bad.load(), 0) << "of " << reads.load() << " reads";
    EXPECT_EQ(file.writes(), 401u);
    EXPECT_EQ(file.failures(), 0u);
    // No temporary file is left behind.
    std::size_t entries = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) {
        ++entries;
    }
    EXPECT_EQ(entries, 1u);
}

TEST(MetricsFile, WrittenWhenTheIntervalHasPassed) {
    test::TempDir dir;
    MetricsFile file(dir / "m.prom", 2.5, "capture", nullptr);
    const auto t0 = MetricsFile::Clock::now();
    EXPECT_TRUE(file.due(t0));  // none written yet
    file.write("x 1\n", t0);
    EXPECT_FALSE(file.due(t0 + std::chrono::seconds(1)));
    EXPECT_FALSE(file.due(t0 + std::chrono::milliseconds(2499)));
    EXPECT_TRUE(file.due(t0 + std::chrono::milliseconds(2500)));
}

// A FIFO (or anything not a regular file) at the path is never replaced nor
// written into: the write fails, is counted and said once, the run goes on.
TEST(MetricsFile, AFifoAtThePathIsNeverReplaced) {
    test::TempDir dir;
    const std::string path = dir / "m.prom";
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
    // A reader holds it open, so a write into it would not wait: it would show.
    const int fifo = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
    ASSERT_GE(fifo, 0);
    const int err_fd = ::open((dir / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(err_fd, 0);
    {
        Console notices(err_fd);
        MetricsFile file(path, 1, "capture", &notices);
        const auto t0 = MetricsFile::Clock::now();
        file.write("x 1\n", t0);
        file.write("x 2\n", t0 + std::chrono::seconds(1));   // not said: within the minute
        file.write("x 3\n", t0 + std::chrono::seconds(61));  // said, with the count
        EXPECT_EQ(file.failures(), 3u);
        EXPECT_EQ(file.writes(), 0u);
    }
    ::close(err_fd);
    char byte = 0;
    EXPECT_LE(::read(fifo, &byte, 1), 0) << "something was written into the FIFO";
    ::close(fifo);
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
    const std::string err = slurp(dir / "err");
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << err;
    EXPECT_NE(err.find("ibvcap capture: cannot write metrics file " + path +
                       ": it is not a regular file now, not replaced"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("2 failures since the last notice"), std::string::npos) << err;
}

// (That it is none of the run's other files, the input, the report or a file
// in -o, is run_path_collision's: test_cli_paths.cpp.)
TEST(MetricsPath, RefusedBeforeTheRun) {
    test::TempDir dir;
    const auto refused = [&](const std::string& path, const std::string& why) {
        try {
            check_metrics_path(path);
        } catch (const std::runtime_error& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(why), std::string::npos) << what;
            EXPECT_NE(what.find("--metrics-file " + path + ": "), std::string::npos) << what;
            EXPECT_EQ(what.find('\n'), std::string::npos) << what;
            return;
        }
        ADD_FAILURE() << path << " was not refused (" << why << ")";
    };
    refused(dir / "nowhere/m.prom", "does not exist");
    ASSERT_EQ(::mkfifo((dir / "fifo.prom").c_str(), 0600), 0);
    refused(dir / "fifo.prom", "not a regular file");
    refused(dir.path().string(), "is a directory");
    // Fine: a new file, an existing regular file.
    EXPECT_NO_THROW(check_metrics_path(dir / "m.prom"));
    { std::ofstream(dir / "old.prom") << "old 1\n"; }
    EXPECT_NO_THROW(check_metrics_path(dir / "old.prom"));
}

}  // namespace
}  // namespace ibvcap
