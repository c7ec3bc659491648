-- CODIF dissector for Wireshark and tshark (both header layouts).
--
-- Install: copy this file to ~/.local/lib/wireshark/plugins/ (Wireshark's
-- "Personal Lua Plugins" folder: Help > About > Folders, or `tshark -G folders`),
-- or load it for one run: `tshark -X lua_script:tools/wireshark/codif.lua -r FILE`.
-- docs/operations.md, "Looking at captures in Wireshark", says more.
--
-- The header layouts are those of docs/formats.md, section 2 (DiFX codifio:
-- difx/difx libraries/codifio/src/codifio.h for v2, its draft revision for the
-- draft); the values shown are what ibvcap's decoder (formats/codif.cpp) gives,
-- and test/e2e/wireshark.sh compares the two field by field.
--
-- Fields (filter names):
--   codif.layout        "v2" or "draft" (which sync word was found where)
--   codif.frame         frame number within the period
--   codif.seconds       seconds since the epoch start
--   codif.epoch         half-years since 2000-01-01
--   codif.nbits         bits per real sample component
--   codif.power, codif.invalid, codif.complex, codif.cal   flags (power, cal: v2 only)
--   codif.representation, codif.version, codif.protocol (protocol: v2 only)
--   codif.period        seconds
--   codif.threadid, codif.groupid, codif.secondaryid (v2 only), codif.stationid
--   codif.nchan         number of channels (the draft stores it minus one; shown real)
--   codif.blocklength   sample block length, 8-byte words
--   codif.framelength   payload bytes (framelength8 * 8, header excluded, both layouts)
--   codif.totalsamples  samples per channel per period
--   codif.sync          the sync word (0xfeedcafe v2, 0xadeadbee draft)
--   codif.metaid, codif.meta1, codif.metadata0, codif.metadata1   (v2 only)
--   codif.payload       the payload bytes
-- Generated (not in the header; the sequence position):
--   codif.samples_per_frame, codif.frames_per_period
--   codif.index         absolute frame index: floor(seconds / period) * frames_per_period + frame
--   codif.gap           index - index of the previous frame of the same stream in capture
--                       order - 1: > 0 frames missing before this one, -1 a repeat, < -1 late
--                       (absent on a stream's first frame)
--   codif.stream        the stream: source IP > destination IP:port thread N
--
-- How it is found:
--   * Heuristically on UDP: a datagram of 64 bytes or more whose sync word is at
--     its layout's offset (0xFEEDCAFE at bytes 40-43, else 0xADEADBEE at 44-47).
--   * On the UDP ports of the preference "CODIF UDP ports" (Edit > Preferences >
--     Protocols > CODIF, or `-o codif.ports:36001,36002`; default none). A frame
--     decoded this way without a sync word gets the expert info codif.bad_sync.
--
-- Why Wireshark used to show some CODIF frames as WireGuard: WireGuard's UDP
-- heuristic (wireshark/wireshark epan/dissectors/packet-wireguard.c,
-- dissect_wg_heur and wg_is_valid_message_length) accepts any datagram whose
-- first byte is 4 ("Transport Data"), whose next three bytes are zero and that
-- is at least 32 bytes long. The first four bytes of a CODIF header are the
-- frame number, little-endian, so every frame number 4 (and, for a bare 64-byte
-- header, frame number 3: "Cookie Reply" is 64 bytes) looked like WireGuard.
-- This dissector wins over it: Wireshark tries the heuristics of a table in
-- the reverse order of registration (epan/packet.c heur_dissector_add
-- prepends), and Lua plugins are registered after every built-in dissector's
-- handoff, so codif's heuristic runs first; its check (a 32-bit sync word at a
-- fixed offset) is far stricter than WireGuard's. test/e2e/wireshark.sh checks
-- that frame number 4 comes out as codif, not wg. A port in the preference
-- wins over every heuristic (UDP tries ports first unless "Try heuristic
-- sub-dissectors first" is set).

local codif = Proto("codif", "CODIF")

local SYNC_V2 = 0xFEEDCAFE
local SYNC_DRAFT = 0xADEADBEE
local HEADER = 64

local F = {
    layout = ProtoField.string("codif.layout", "Layout"),
    frame = ProtoField.uint32("codif.frame", "Frame", base.DEC),
    seconds = ProtoField.uint32("codif.seconds", "Seconds", base.DEC),
    epoch = ProtoField.uint8("codif.epoch", "Epoch (half-years since 2000)", base.DEC),
    nbits = ProtoField.uint8("codif.nbits", "Bits per sample", base.DEC),
    power = ProtoField.bool("codif.power", "Power"),
    invalid = ProtoField.bool("codif.invalid", "Invalid"),
    complex = ProtoField.bool("codif.complex", "Complex"),
    cal = ProtoField.bool("codif.cal", "Cal enabled"),
    representation = ProtoField.uint8("codif.representation", "Representation", base.DEC),
    version = ProtoField.uint8("codif.version", "Version", base.DEC),
    protocol = ProtoField.uint8("codif.protocol", "Protocol", base.DEC),
    period = ProtoField.uint16("codif.period", "Period (s)", base.DEC),
    threadid = ProtoField.uint16("codif.threadid", "Thread ID", base.DEC),
    groupid = ProtoField.uint16("codif.groupid", "Group ID", base.DEC),
    secondaryid = ProtoField.uint16("codif.secondaryid", "Secondary ID", base.DEC),
    stationid = ProtoField.uint16("codif.stationid", "Station ID", base.DEC),
    nchan = ProtoField.uint32("codif.nchan", "Channels", base.DEC),
    blocklength = ProtoField.uint16("codif.blocklength", "Sample block length (8-byte words)", base.DEC),
    framelength = ProtoField.uint64("codif.framelength", "Frame length (payload bytes)", base.DEC),
    totalsamples = ProtoField.uint64("codif.totalsamples", "Total samples per period", base.DEC),
    sync = ProtoField.uint32("codif.sync", "Sync", base.HEX),
    metaid = ProtoField.uint16("codif.metaid", "Metadata ID", base.DEC),
    meta1 = ProtoField.uint16("codif.meta1", "Metadata 1", base.DEC),
    metadata0 = ProtoField.uint64("codif.metadata0", "Metadata word 6", base.HEX),
    metadata1 = ProtoField.uint64("codif.metadata1", "Metadata word 7", base.HEX),
    payload = ProtoField.bytes("codif.payload", "Payload"),
    samples_per_frame = ProtoField.uint64("codif.samples_per_frame", "Samples per frame", base.DEC),
    frames_per_period = ProtoField.uint64("codif.frames_per_period", "Frames per period", base.DEC),
    index = ProtoField.uint64("codif.index", "Absolute frame index", base.DEC),
    gap = ProtoField.int64("codif.gap", "Gap from the previous frame of the stream", base.DEC),
    stream = ProtoField.string("codif.stream", "Stream"),
}
codif.fields = {}
for _, f in pairs(F) do
    table.insert(codif.fields, f)
end

local E = {
    bad_sync = ProtoExpert.new("codif.bad_sync", "No CODIF sync word (0xFEEDCAFE at 40 or 0xADEADBEE at 44)",
        expert.group.MALFORMED, expert.severity.ERROR),
    short = ProtoExpert.new("codif.short", "Shorter than the 64-byte CODIF header",
        expert.group.MALFORMED, expert.severity.ERROR),
    length = ProtoExpert.new("codif.length_mismatch", "Frame length disagrees with the UDP length",
        expert.group.MALFORMED, expert.severity.ERROR),
    missing = ProtoExpert.new("codif.missing", "Frames missing before this one",
        expert.group.SEQUENCE, expert.severity.WARN),
    repeat_ = ProtoExpert.new("codif.repeat", "A repeat or late frame of this stream",
        expert.group.SEQUENCE, expert.severity.NOTE),
}
codif.experts = { E.bad_sync, E.short, E.length, E.missing, E.repeat_ }

codif.prefs.ports = Pref.range("CODIF UDP ports", "", "UDP ports always decoded as CODIF", 65535)

-- Bits [shift, shift + width) of a 32-bit word held in a Lua number. Plain
-- arithmetic, not bit32: Lua 5.2 (Wireshark up to 4.4) has bit32, 5.4 does not.
local function bits(word, shift, width)
    return math.floor(word / 2 ^ shift) % 2 ^ width
end

local function layout_of(tvb)
    if tvb:len() < HEADER then
        return nil
    end
    if tvb(40, 4):le_uint() == SYNC_V2 then
        return "v2"
    end
    if tvb(44, 4):le_uint() == SYNC_DRAFT then
        return "draft"
    end
    return nil
end

-- Every field of the header, as docs/formats.md section 2 lays it out, with
-- the byte range each comes from.
local function decode(tvb, layout)
    local h = { layout = layout }
    local function put(name, value, offset, len)
        h[name] = { value = value, range = tvb(offset, len) }
    end
    if layout == "v2" then
        put("frame", tvb(0, 4):le_uint(), 0, 4)
        put("seconds", tvb(4, 4):le_uint(), 4, 4)
        put("epoch", tvb(8, 1):uint(), 8, 1)
        put("nbits", tvb(9, 1):uint(), 9, 1)
        local flags = tvb(10, 1):uint()
        put("power", bits(flags, 0, 1) == 1, 10, 1)
        put("invalid", bits(flags, 1, 1) == 1, 10, 1)
        put("complex", bits(flags, 2, 1) == 1, 10, 1)
        put("cal", bits(flags, 3, 1) == 1, 10, 1)
        put("representation", bits(flags, 4, 4), 10, 1)
        local b11 = tvb(11, 1):uint()
        put("version", bits(b11, 0, 5), 11, 1)
        put("protocol", bits(b11, 5, 3), 11, 1)
        put("period", tvb(14, 2):le_uint(), 14, 2)
        put("threadid", tvb(16, 2):le_uint(), 16, 2)
        put("groupid", tvb(18, 2):le_uint(), 18, 2)
        put("secondaryid", tvb(20, 2):le_uint(), 20, 2)
        put("stationid", tvb(22, 2):le_uint(), 22, 2)
        put("nchan", tvb(24, 2):le_uint(), 24, 2)
        put("blocklength", tvb(26, 2):le_uint(), 26, 2)
        put("framelength8", tvb(28, 4):le_uint(), 28, 4)
        put("totalsamples", tvb(32, 8):le_uint64(), 32, 8)
        put("sync", tvb(40, 4):le_uint(), 40, 4)
        put("metaid", tvb(44, 2):le_uint(), 44, 2)
        put("meta1", tvb(46, 2):le_uint(), 46, 2)
        put("metadata0", tvb(48, 8):le_uint64(), 48, 8)
        put("metadata1", tvb(56, 8):le_uint64(), 56, 8)
    else
        put("frame", tvb(0, 4):le_uint(), 0, 4)
        local w1 = tvb(4, 4):le_uint()
        put("seconds", bits(w1, 0, 30), 4, 4)
        put("complex", bits(w1, 30, 1) == 1, 4, 4)
        put("invalid", bits(w1, 31, 1) == 1, 4, 4)
        local w2 = tvb(8, 4):le_uint()
        put("stationid", bits(w2, 0, 16), 8, 4)
        put("representation", bits(w2, 22, 4), 8, 4)
        put("epoch", bits(w2, 26, 6), 8, 4)
        local w3 = tvb(12, 4):le_uint()
        put("framelength8", bits(w3, 0, 24), 12, 4) -- payload / 8, header excluded
        put("nbits", bits(w3, 24, 5), 12, 4)
        put("version", bits(w3, 29, 3), 12, 4)
        local w4 = tvb(16, 4):le_uint()
        put("groupid", bits(w4, 0, 16), 16, 4)
        put("threadid", bits(w4, 16, 16), 16, 4)
        local w5 = tvb(20, 4):le_uint()
        -- Stored minus one; 0xFFFF would be 65536, which ibvcap decodes as 0 (formats/codif.cpp).
        put("nchan", (bits(w5, 0, 16) + 1) % 65536, 20, 4)
        put("blocklength", bits(w5, 16, 16), 20, 4)
        put("period", tvb(28, 2):le_uint(), 28, 2)
        put("totalsamples", tvb(32, 8):le_uint64(), 32, 8)
        put("sync", tvb(44, 4):le_uint(), 44, 4)
    end
    return h
end

-- Sequence arithmetic of docs/formats.md, "Sequence arithmetic" (ibvcap's
-- codif_samples_per_frame / codif_frames_per_period): nil where undefined.
local MAX_FPP = 2 ^ 31
local function sequence(h)
    local divisor = h.nchan.value * h.nbits.value * (h.complex.value and 2 or 1)
    if divisor == 0 then
        return nil
    end
    local payload_bits = h.framelength8.value * 64
    -- A header-only frame (framelength 0) has no samples: nil, as ibvcap's 0,
    -- and never a UInt64 modulo by zero below (a Lua error in the tree).
    if payload_bits == 0 or payload_bits % divisor ~= 0 then
        return nil
    end
    local spf = UInt64(payload_bits / divisor)
    local total = h.totalsamples.value
    if total % spf ~= UInt64(0) then
        return spf, nil
    end
    local fpp = total / spf
    if fpp > UInt64(MAX_FPP) then
        return spf, nil
    end
    if h.period.value == 0 then
        return spf, fpp, nil
    end
    local periods = math.floor(h.seconds.value / h.period.value)
    local index = UInt64(periods) * fpp + UInt64(h.frame.value)
    return spf, fpp, index
end

-- Per stream, the index of its previous frame in capture order; per frame
-- number, the gap worked out on the first pass (so that Wireshark's later
-- passes over the same frame show the same thing).
local last_index = {}
local gaps = {}

function codif.init()
    last_index = {}
    gaps = {}
end

local function dissect(tvb, pinfo, tree, layout)
    local t = tree:add(codif, tvb(0, math.min(tvb:len(), HEADER)))
    if layout == nil then
        if tvb:len() < HEADER then
            t:add_proto_expert_info(E.short)
        else
            t:add_proto_expert_info(E.bad_sync)
        end
        return
    end
    pinfo.cols.protocol = "CODIF"
    local h = decode(tvb, layout)
    t:add(F.layout, tvb(layout == "v2" and 40 or 44, 4), layout)
    for _, name in ipairs({ "frame", "seconds", "epoch", "nbits", "power", "invalid", "complex", "cal",
        "representation", "version", "protocol", "period", "threadid", "groupid", "secondaryid",
        "stationid", "nchan", "blocklength" }) do
        if h[name] then
            t:add(F[name], h[name].range, h[name].value)
        end
    end
    local payload_bytes = UInt64(h.framelength8.value) * 8
    t:add(F.framelength, h.framelength8.range, payload_bytes)
    for _, name in ipairs({ "totalsamples", "sync", "metaid", "meta1", "metadata0", "metadata1" }) do
        if h[name] then
            t:add(F[name], h[name].range, h[name].value)
        end
    end
    if UInt64(tvb:reported_length_remaining() - HEADER) ~= payload_bytes then
        t:add_proto_expert_info(E.length)
    end
    if tvb:len() > HEADER then
        t:add(F.payload, tvb(HEADER))
    end

    local stream = string.format("%s > %s:%d thread %d", tostring(pinfo.src), tostring(pinfo.dst),
        pinfo.dst_port, h.threadid.value)
    t:add(F.stream, stream):set_generated()
    local spf, fpp, index = sequence(h)
    if spf then
        t:add(F.samples_per_frame, spf):set_generated()
    end
    if fpp then
        t:add(F.frames_per_period, fpp):set_generated()
    end
    local info = string.format("CODIF %s station %d thread %d %d:%d", layout, h.stationid.value,
        h.threadid.value, h.seconds.value, h.frame.value)
    if index then
        t:add(F.index, index):set_generated()
        if not pinfo.visited then
            local previous = last_index[stream]
            if previous then
                gaps[pinfo.number] = Int64(index) - Int64(previous) - 1
            end
            last_index[stream] = index
        end
        local gap = gaps[pinfo.number]
        if gap then
            local item = t:add(F.gap, gap):set_generated()
            if gap > Int64(0) then
                item:add_proto_expert_info(E.missing, "missing " .. tostring(gap) .. " frames before this one")
                info = info .. " [missing " .. tostring(gap) .. " before]"
            elseif gap < Int64(0) then
                item:add_proto_expert_info(E.repeat_, gap == Int64(-1) and "a repeat of the previous frame"
                    or "late: " .. tostring(-gap - 1) .. " frames behind the previous one")
            end
        end
    end
    pinfo.cols.info = info
end

function codif.dissector(tvb, pinfo, tree)
    dissect(tvb, pinfo, tree, layout_of(tvb))
    return tvb:len()
end

local function heuristic(tvb, pinfo, tree)
    local layout = layout_of(tvb)
    if layout == nil then
        return false
    end
    dissect(tvb, pinfo, tree, layout)
    return true
end
codif:register_heuristic("udp", heuristic)

local registered_ports = ""
function codif.prefs_changed()
    local udp = DissectorTable.get("udp.port")
    if registered_ports ~= "" then
        udp:remove(registered_ports, codif)
    end
    registered_ports = codif.prefs.ports
    if registered_ports ~= "" then
        udp:add(registered_ports, codif)
    end
end
