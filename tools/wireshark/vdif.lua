-- VDIF dissector for Wireshark and tshark (VLBI Data Interchange Format,
-- release 1.1.1; standard and legacy headers, extended data versions 1-4),
-- and the VDIF Transport Protocol (VTP: a 64-bit little-endian packet
-- sequence number before each frame, what jive5ab's udps sends).
--
-- Install: copy this file to ~/.local/lib/wireshark/plugins/ (Wireshark's
-- "Personal Lua Plugins" folder: Help > About > Folders, or `tshark -G folders`),
-- or load it for one run: `tshark -X lua_script:tools/wireshark/vdif.lua -r FILE`.
--
-- How it is found. VDIF has no sync word, so no heuristic can tell a VDIF
-- datagram from any other: it is decoded only where you say so.
--   * The preference "VDIF UDP ports" (Edit > Preferences > Protocols > VDIF,
--     or `-o vdif.ports:46220,46221`; default none): datagrams to or from these
--     ports are VDIF. With the preference "Datagrams are VTP" (`-o vdif.vtp:TRUE`)
--     they are VTP instead: the first 8 bytes are the sequence number.
--   * "Decode As" (Analyze > Decode As, or `tshark -d udp.port==46220,vdif`):
--     "VDIF" for plain frames, "VDIFVTP" (`-d udp.port==46220,vdifvtp`) for VTP,
--     whatever the preferences say.
--
-- The header layout is the one listed at the top of formats/vdif.cpp (VDIF
-- 1.1.1; the EDV fields as DiFX's vdifio and the baseband package both define
-- them); the values shown are what ibvcap's decoder (formats/vdif.hpp) gives,
-- and test/e2e/wireshark.sh compares the two field by field.
--
-- Fields (filter names):
--   vdif.psn            VTP packet sequence number (VTP only)
--   vdif.invalid        w0 bit 31
--   vdif.legacy         w0 bit 30: a 16-byte header (no words 4-7)
--   vdif.seconds        w0 0-29: seconds since the reference epoch
--   vdif.epoch          w1 24-29: half-years since 2000-01-01
--   vdif.frame          w1 0-23: frame number within the second
--   vdif.version        w2 29-31
--   vdif.nchan          number of channels (the header stores log2; shown real)
--   vdif.framelength    frame bytes, header included (the header stores bytes / 8)
--   vdif.complex        w3 bit 31
--   vdif.nbits          bits per sample (the header stores bits - 1; shown real)
--   vdif.thread         w3 16-25
--   vdif.station        w3 0-15
--   vdif.edv            w4 24-31: extended data version (standard headers only)
--   EDV 1 (NICT):  vdif.edv1.sample_rate, vdif.edv1.sample_rate_mhz (0 kHz, 1 MHz),
--                  vdif.edv1.sync, vdif.edv1.das_id (w6 | w7 << 32; its eight bytes
--                  are the DAS/station name, shown beside it)
--   EDV 2 (ALMA):  vdif.edv2.pol, vdif.edv2.quadrant_minus1, vdif.edv2.correlator,
--                  vdif.edv2.sync (20 bits), vdif.edv2.status, vdif.edv2.psn
--   EDV 3 (VLBA):  vdif.edv3.sample_rate, vdif.edv3.sample_rate_mhz, vdif.edv3.sync,
--                  vdif.edv3.loif_tuning, vdif.edv3.personality, vdif.edv3.minor_rev,
--                  vdif.edv3.major_rev, vdif.edv3.sideband_upper, vdif.edv3.subband,
--                  vdif.edv3.if_number, vdif.edv3.dbe_unit, vdif.edv3.unassigned
--   EDV 4:         vdif.edv4.unassigned, vdif.edv4.mask_length, vdif.edv4.sync,
--                  vdif.edv4.validity_mask (w6 | w7 << 32)
--   other EDVs (0 included): vdif.extended1 (w4 0-23), vdif.extended2,
--                  vdif.extended3, vdif.extended4 (w5-w7)
--   vdif.payload        the payload bytes
-- Generated (not in the header):
--   vdif.stream         the stream: source IP > destination IP:port station S thread T
--   vdif.index, vdif.gap  only with the preference "Frames per second"
--                       (`-o vdif.frames_per_second:25600`; default 0, unknown: VDIF
--                       headers do not say): index = seconds * frames per second +
--                       frame; gap = index - the index of the stream's previous frame
--                       in capture order - 1: > 0 frames missing, -1 a repeat, < -1 late.

local vdif = Proto("vdif", "VDIF")
local vdifvtp = Proto("vdifvtp", "VDIF Transport Protocol")

local HEADER = 32
local LEGACY_HEADER = 16
local PSN = 8

local F = {
    psn = ProtoField.uint64("vdif.psn", "VTP packet sequence number", base.DEC),
    invalid = ProtoField.bool("vdif.invalid", "Invalid"),
    legacy = ProtoField.bool("vdif.legacy", "Legacy (16-byte header)"),
    seconds = ProtoField.uint32("vdif.seconds", "Seconds from the reference epoch", base.DEC),
    epoch = ProtoField.uint8("vdif.epoch", "Reference epoch (half-years since 2000)", base.DEC),
    frame = ProtoField.uint32("vdif.frame", "Frame", base.DEC),
    version = ProtoField.uint8("vdif.version", "Version", base.DEC),
    nchan = ProtoField.uint32("vdif.nchan", "Channels", base.DEC),
    framelength = ProtoField.uint32("vdif.framelength", "Frame length (bytes, header included)", base.DEC),
    complex = ProtoField.bool("vdif.complex", "Complex"),
    nbits = ProtoField.uint8("vdif.nbits", "Bits per sample", base.DEC),
    thread = ProtoField.uint16("vdif.thread", "Thread ID", base.DEC),
    station = ProtoField.uint16("vdif.station", "Station ID", base.DEC),
    edv = ProtoField.uint8("vdif.edv", "Extended data version", base.DEC),
    extended1 = ProtoField.uint32("vdif.extended1", "Extended data, word 4 bits 0-23", base.HEX),
    extended2 = ProtoField.uint32("vdif.extended2", "Extended data, word 5", base.HEX),
    extended3 = ProtoField.uint32("vdif.extended3", "Extended data, word 6", base.HEX),
    extended4 = ProtoField.uint32("vdif.extended4", "Extended data, word 7", base.HEX),
    edv1_sample_rate = ProtoField.uint32("vdif.edv1.sample_rate", "Sample rate", base.DEC),
    edv1_sample_rate_mhz = ProtoField.bool("vdif.edv1.sample_rate_mhz", "Sample rate in MHz (else kHz)"),
    edv1_sync = ProtoField.uint32("vdif.edv1.sync", "Sync word", base.HEX),
    edv1_das_id = ProtoField.uint64("vdif.edv1.das_id", "DAS/station name (words 6-7)", base.HEX),
    edv2_pol = ProtoField.bool("vdif.edv2.pol", "Polarisation block"),
    edv2_quadrant_minus1 = ProtoField.uint8("vdif.edv2.quadrant_minus1", "BL quadrant - 1", base.DEC),
    edv2_correlator = ProtoField.bool("vdif.edv2.correlator", "BL correlator"),
    edv2_sync = ProtoField.uint32("vdif.edv2.sync", "Sync / sub-version (20 bits)", base.HEX),
    edv2_status = ProtoField.uint32("vdif.edv2.status", "Status (ALMA PIC status)", base.HEX),
    edv2_psn = ProtoField.uint64("vdif.edv2.psn", "Packet serial number", base.DEC),
    edv3_sample_rate = ProtoField.uint32("vdif.edv3.sample_rate", "Sample rate", base.DEC),
    edv3_sample_rate_mhz = ProtoField.bool("vdif.edv3.sample_rate_mhz", "Sample rate in MHz (else kHz)"),
    edv3_sync = ProtoField.uint32("vdif.edv3.sync", "Sync word", base.HEX),
    edv3_loif_tuning = ProtoField.uint32("vdif.edv3.loif_tuning", "LO/IF tuning (2^-24 MHz)", base.DEC),
    edv3_personality = ProtoField.uint8("vdif.edv3.personality", "Personality type", base.DEC),
    edv3_minor_rev = ProtoField.uint8("vdif.edv3.minor_rev", "Minor revision", base.DEC),
    edv3_major_rev = ProtoField.uint8("vdif.edv3.major_rev", "Major revision", base.DEC),
    edv3_sideband_upper = ProtoField.bool("vdif.edv3.sideband_upper", "Upper sideband"),
    edv3_subband = ProtoField.uint8("vdif.edv3.subband", "Sub-band", base.DEC),
    edv3_if_number = ProtoField.uint8("vdif.edv3.if_number", "IF number", base.DEC),
    edv3_dbe_unit = ProtoField.uint8("vdif.edv3.dbe_unit", "DBE unit", base.DEC),
    edv3_unassigned = ProtoField.uint8("vdif.edv3.unassigned", "Word 7 bits 28-31", base.DEC),
    edv4_unassigned = ProtoField.uint16("vdif.edv4.unassigned", "Word 4 bits 0-15", base.DEC),
    edv4_mask_length = ProtoField.uint8("vdif.edv4.mask_length", "Validity mask length", base.DEC),
    edv4_sync = ProtoField.uint32("vdif.edv4.sync", "Sync word", base.HEX),
    edv4_validity_mask = ProtoField.uint64("vdif.edv4.validity_mask", "Validity mask", base.HEX),
    payload = ProtoField.bytes("vdif.payload", "Payload"),
    stream = ProtoField.string("vdif.stream", "Stream"),
    index = ProtoField.uint64("vdif.index", "Absolute frame index", base.DEC),
    gap = ProtoField.int64("vdif.gap", "Gap from the previous frame of the stream", base.DEC),
}
vdif.fields = {}
for _, f in pairs(F) do
    table.insert(vdif.fields, f)
end

local E = {
    short = ProtoExpert.new("vdif.short", "Shorter than the VDIF header (32 bytes, 16 legacy)",
        expert.group.MALFORMED, expert.severity.ERROR),
    length = ProtoExpert.new("vdif.length_mismatch", "Frame length disagrees with the UDP length",
        expert.group.MALFORMED, expert.severity.ERROR),
    missing = ProtoExpert.new("vdif.missing", "Frames missing before this one",
        expert.group.SEQUENCE, expert.severity.WARN),
    repeat_ = ProtoExpert.new("vdif.repeat", "A repeat or late frame of this stream",
        expert.group.SEQUENCE, expert.severity.NOTE),
}
vdif.experts = { E.short, E.length, E.missing, E.repeat_ }

vdif.prefs.ports = Pref.range("VDIF UDP ports", "", "UDP ports decoded as VDIF (or VTP)", 65535)
vdif.prefs.vtp = Pref.bool("Datagrams are VTP", false,
    "Datagrams on the VDIF ports start with VTP's 8-byte sequence number")
vdif.prefs.frames_per_second = Pref.uint("Frames per second", 0,
    "Frames per second of every stream (0: unknown); gives vdif.index and vdif.gap")

-- Bits [shift, shift + width) of a 32-bit word held in a Lua number. Plain
-- arithmetic, not bit32: Lua 5.2 (Wireshark up to 4.4) has bit32, 5.4 does not.
local function bits(word, shift, width)
    return math.floor(word / 2 ^ shift) % 2 ^ width
end

-- Per stream, the index of its previous frame in capture order; per frame
-- number, the gap worked out on the first pass.
local last_index = {}
local gaps = {}

function vdif.init()
    last_index = {}
    gaps = {}
end

local function add_edv(t, tvb, edv)
    local w4r, w5r, w6r, w7r = tvb(16, 4), tvb(20, 4), tvb(24, 4), tvb(28, 4)
    local w4, w5, w6, w7 = w4r:le_uint(), w5r:le_uint(), w6r:le_uint(), w7r:le_uint()
    local w67r = tvb(24, 8)
    if edv == 1 or edv == 3 then
        local p = edv == 1 and "edv1_" or "edv3_"
        t:add(F[p .. "sample_rate"], w4r, bits(w4, 0, 23))
        t:add(F[p .. "sample_rate_mhz"], w4r, bits(w4, 23, 1) == 1)
        t:add(F[p .. "sync"], w5r, w5)
        if edv == 1 then
            local name = ""
            for i = 0, 7 do
                local c = w67r(i, 1):uint()
                name = name .. ((c >= 0x20 and c < 0x7F) and string.char(c) or ".")
            end
            t:add(F.edv1_das_id, w67r, w67r:le_uint64()):append_text(' ("' .. name .. '")')
        else
            t:add(F.edv3_loif_tuning, w6r, w6)
            t:add(F.edv3_personality, w7r, bits(w7, 0, 8))
            t:add(F.edv3_minor_rev, w7r, bits(w7, 8, 4))
            t:add(F.edv3_major_rev, w7r, bits(w7, 12, 4))
            t:add(F.edv3_sideband_upper, w7r, bits(w7, 16, 1) == 1)
            t:add(F.edv3_subband, w7r, bits(w7, 17, 3))
            t:add(F.edv3_if_number, w7r, bits(w7, 20, 4))
            t:add(F.edv3_dbe_unit, w7r, bits(w7, 24, 4))
            t:add(F.edv3_unassigned, w7r, bits(w7, 28, 4))
        end
    elseif edv == 2 then
        t:add(F.edv2_pol, w4r, bits(w4, 0, 1) == 1)
        t:add(F.edv2_quadrant_minus1, w4r, bits(w4, 1, 2))
        t:add(F.edv2_correlator, w4r, bits(w4, 3, 1) == 1)
        t:add(F.edv2_sync, w4r, bits(w4, 4, 20))
        t:add(F.edv2_status, w5r, w5)
        t:add(F.edv2_psn, w67r, w67r:le_uint64())
    elseif edv == 4 then
        t:add(F.edv4_unassigned, w4r, bits(w4, 0, 16))
        t:add(F.edv4_mask_length, w4r, bits(w4, 16, 8))
        t:add(F.edv4_sync, w5r, w5)
        t:add(F.edv4_validity_mask, w67r, w67r:le_uint64())
    else
        t:add(F.extended1, w4r, bits(w4, 0, 24))
        t:add(F.extended2, w5r, w5)
        t:add(F.extended3, w6r, w6)
        t:add(F.extended4, w7r, w7)
    end
end

-- `tvb` is the datagram; `vtp`: it starts with the sequence number.
local function dissect(tvb, pinfo, tree, vtp)
    local prefix = vtp and PSN or 0
    local t = tree:add(vdif, tvb(0, math.min(tvb:len(), prefix + HEADER)))
    pinfo.cols.protocol = vtp and "VDIF/VTP" or "VDIF"
    if tvb:len() < prefix + LEGACY_HEADER then
        t:add_proto_expert_info(E.short)
        return
    end
    local frame = tvb(prefix):tvb()
    local w0r, w1r, w2r, w3r = frame(0, 4), frame(4, 4), frame(8, 4), frame(12, 4)
    local w0, w1, w2, w3 = w0r:le_uint(), w1r:le_uint(), w2r:le_uint(), w3r:le_uint()
    local legacy = bits(w0, 30, 1) == 1
    local header = legacy and LEGACY_HEADER or HEADER
    if frame:len() < header then
        t:add_proto_expert_info(E.short)
        return
    end
    if vtp then
        t:add(F.psn, tvb(0, PSN), tvb(0, PSN):le_uint64())
    end
    local seconds, frame_nr = bits(w0, 0, 30), bits(w1, 0, 24)
    local station, thread = bits(w3, 0, 16), bits(w3, 16, 10)
    local framelength = bits(w2, 0, 24) * 8
    t:add(F.invalid, w0r, bits(w0, 31, 1) == 1)
    t:add(F.legacy, w0r, legacy)
    t:add(F.seconds, w0r, seconds)
    t:add(F.epoch, w1r, bits(w1, 24, 6))
    t:add(F.frame, w1r, frame_nr)
    t:add(F.version, w2r, bits(w2, 29, 3))
    t:add(F.nchan, w2r, 2 ^ bits(w2, 24, 5))
    t:add(F.framelength, w2r, framelength)
    t:add(F.complex, w3r, bits(w3, 31, 1) == 1)
    t:add(F.nbits, w3r, bits(w3, 26, 5) + 1)
    t:add(F.thread, w3r, thread)
    t:add(F.station, w3r, station)
    if not legacy then
        local edv = frame(19, 1):uint()
        t:add(F.edv, frame(19, 1), edv)
        add_edv(t, frame, edv)
    end
    if frame:reported_length_remaining() ~= framelength then
        t:add_proto_expert_info(E.length)
    end
    if frame:len() > header then
        t:add(F.payload, frame(header))
    end

    local stream = string.format("%s > %s:%d station %d thread %d", tostring(pinfo.src),
        tostring(pinfo.dst), pinfo.dst_port, station, thread)
    t:add(F.stream, stream):set_generated()
    local info = string.format("VDIF%s station %d thread %d %d:%d", vtp and "/VTP" or "", station,
        thread, seconds, frame_nr)
    local fps = vdif.prefs.frames_per_second
    if fps > 0 then
        local index = UInt64(seconds) * UInt64(fps) + UInt64(frame_nr)
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

function vdif.dissector(tvb, pinfo, tree)
    dissect(tvb, pinfo, tree, false)
    return tvb:len()
end

function vdifvtp.dissector(tvb, pinfo, tree)
    dissect(tvb, pinfo, tree, true)
    return tvb:len()
end

-- "Decode As" offers both; the port preference picks one by vdif.vtp.
local udp = DissectorTable.get("udp.port")
udp:add_for_decode_as(vdif)
udp:add_for_decode_as(vdifvtp)

local registered_ports = ""
local registered_proto = nil
function vdif.prefs_changed()
    if registered_ports ~= "" and registered_proto then
        udp:remove(registered_ports, registered_proto)
    end
    registered_ports = vdif.prefs.ports
    registered_proto = vdif.prefs.vtp and vdifvtp or vdif
    if registered_ports ~= "" then
        udp:add(registered_ports, registered_proto)
    end
end
