#!/usr/bin/env python3
"""Lists the GPU code embedded in a CUDA fat binary without cuobjdump.

Reads the fatbin data of a host ELF file (its .nv_fatbin or __nv_relfatbin section: a
shared library, an executable or an object file built by nvcc) or a raw .fatbin file,
walks every fatbin container in it and prints one line per entry: its kind (ELF machine
code or PTX), its architecture, its size and how that architecture was confirmed.

Usage:
  fatbin_archs.py FILE [--expect-elf 80,90] [--expect-ptx 90] [--exact]
  fatbin_archs.py --self-test NVCC

Exit status: 0 when every expected architecture is present (with --exact: and nothing
else), 1 when one is missing or unexpected, 2 when the file is not a well-formed fatbin
or an entry contradicts itself (entry header against the payload's own architecture).

Layout (little-endian; public, reverse-engineered descriptions agree with what nvcc 12/13
writes, and --self-test checks it against nvcc on this machine):
  container header, 16 bytes: u32 magic 0xBA55ED50, u16 version 1, u16 header size (16),
      u64 size of the entries that follow the header.
  entry header (64 bytes, more on newer toolkits, the size is in the header itself):
      +0 u16 kind (1 = PTX, 2 = ELF cubin), +2 u16 version, +4 u32 header size,
      +8 u64 payload size (padded to 8 bytes), +16 u32 compressed size (0 when stored
      plain), +24 u16 code version minor, +26 u16 major, +28 u32 architecture (sm number),
      +40 u64 flags (0x8000 = payload compressed; CUDA 13 uses zstd frames).
  The next entry starts at entry + header size + payload size; the next container at the
  end of this one (zero padding between containers is skipped).

Each entry's architecture comes from its header and is cross-checked against the payload
where the payload can be read: a cubin's ELF header (EI_OSABI 0x41, e_machine EM_CUDA 190)
carries the SM number in e_flags (bits 8..15 from ELF ABI version 8, bits 0..7 before), a
PTX text names it in its `.target sm_NN` directive. Compressed payloads are decompressed
with the `zstd` program when it is installed and they are zstd frames; otherwise the
entry header is the only source and the output says so.
"""

import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
KIND_PTX = 1
KIND_ELF = 2
FLAG_COMPRESSED = 0x8000
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
EM_CUDA = 190
ELFOSABI_CUDA = 0x41


class FatbinError(Exception):
    """The input is not a well-formed fatbin, or an entry contradicts its payload."""


class Entry:
    def __init__(self, container, kind, arch, header_size, payload_size, compressed_size, flags):
        self.container = container
        self.kind = kind
        self.arch = arch
        self.header_size = header_size
        self.payload_size = payload_size
        self.compressed_size = compressed_size
        self.flags = flags
        self.compressed = bool(flags & FLAG_COMPRESSED) or compressed_size != 0
        self.confirmed_by = "entry header only"

    def kind_name(self):
        return {KIND_PTX: "PTX", KIND_ELF: "ELF"}.get(self.kind, "kind%d" % self.kind)

    def arch_name(self):
        if self.kind == KIND_PTX:
            return "compute_%d" % self.arch
        return "sm_%d" % self.arch

    def describe(self):
        return "container %d: %-3s %-11s %9d bytes%s, arch confirmed by %s" % (
            self.container, self.kind_name(), self.arch_name(), self.payload_size,
            " (compressed)" if self.compressed else "", self.confirmed_by)


def fatbin_sections(data, path):
    """Returns the fatbin bytes of a host ELF file, or the whole file when it is a raw fatbin."""
    if len(data) >= 4 and struct.unpack_from("<I", data, 0)[0] == FATBIN_MAGIC:
        return [("raw fatbin", data)]
    if data[:4] != b"\x7fELF":
        raise FatbinError("%s is neither an ELF file nor a raw fatbin (first bytes %r)" % (path, data[:4]))
    if data[4] != 2 or data[5] != 1:
        raise FatbinError("%s: only 64-bit little-endian ELF files are supported (EI_CLASS %d, EI_DATA %d)"
                          % (path, data[4], data[5]))
    e_shoff, = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if e_shoff == 0 or e_shnum == 0:
        raise FatbinError("%s has no section headers (stripped with --strip-section-headers?)" % path)

    def section(index):
        name, sh_type, _, _, sh_offset, sh_size = struct.unpack_from("<IIQQQQ", data, e_shoff + index * e_shentsize)
        return name, sh_type, sh_offset, sh_size

    _, _, strtab_offset, strtab_size = section(e_shstrndx)
    strtab = data[strtab_offset:strtab_offset + strtab_size]
    found = []
    for index in range(e_shnum):
        name_offset, sh_type, sh_offset, sh_size = section(index)
        name = strtab[name_offset:strtab.index(b"\0", name_offset)].decode("ascii", "replace")
        if name in FATBIN_SECTIONS:
            if sh_type == 8:  # SHT_NOBITS
                raise FatbinError("%s: section %s has no bytes in the file" % (path, name))
            found.append((name, data[sh_offset:sh_offset + sh_size]))
    if not found:
        raise FatbinError("%s has no %s section: it embeds no CUDA device code"
                          % (path, " or ".join(FATBIN_SECTIONS)))
    return found


def parse_fatbin(blob, where):
    """Walks every container of a fatbin blob; returns its entries."""
    entries = []
    offset = 0
    container = 0
    while offset < len(blob):
        if blob[offset] == 0:  # padding between containers
            offset += 1
            continue
        if offset + 16 > len(blob):
            raise FatbinError("%s: %d trailing bytes at offset %d are not a fatbin header"
                              % (where, len(blob) - offset, offset))
        magic, version, header_size, body_size = struct.unpack_from("<IHHQ", blob, offset)
        if magic != FATBIN_MAGIC:
            raise FatbinError("%s: bad fatbin magic 0x%08X at offset %d (expected 0x%08X)"
                              % (where, magic, offset, FATBIN_MAGIC))
        if header_size < 16:
            raise FatbinError("%s: fatbin header size %d at offset %d is below 16" % (where, header_size, offset))
        end = offset + header_size + body_size
        if end > len(blob):
            raise FatbinError("%s: fatbin container at offset %d claims %d bytes, only %d remain"
                              % (where, offset, header_size + body_size, len(blob) - offset))
        position = offset + header_size
        while position < end:
            if position + 64 > end:
                raise FatbinError("%s: truncated entry header at offset %d (container ends at %d)"
                                  % (where, position, end))
            kind, _, entry_header_size, payload_size = struct.unpack_from("<HHIQ", blob, position)
            compressed_size, = struct.unpack_from("<I", blob, position + 16)
            arch, = struct.unpack_from("<I", blob, position + 28)
            flags, = struct.unpack_from("<Q", blob, position + 40)
            if entry_header_size < 64 or position + entry_header_size + payload_size > end:
                raise FatbinError("%s: entry at offset %d has header size %d and payload size %d, "
                                  "past the container end %d" % (where, position, entry_header_size,
                                                                 payload_size, end))
            entry = Entry(container, kind, arch, entry_header_size, payload_size, compressed_size, flags)
            payload = blob[position + entry_header_size:position + entry_header_size + payload_size]
            cross_check(entry, payload, "%s offset %d" % (where, position))
            entries.append(entry)
            position += entry_header_size + payload_size
        offset = end
        container += 1
    return entries


def decompress(entry, payload):
    """The plain payload, or None when it cannot be decompressed here (with the reason)."""
    if not entry.compressed:
        return payload, None
    stored = payload[:entry.compressed_size] if entry.compressed_size else payload
    if not stored.startswith(ZSTD_MAGIC):
        return None, "compressed, not a zstd frame"
    zstd = shutil.which("zstd")
    if zstd is None:
        return None, "compressed, no zstd program to decompress it"
    result = subprocess.run([zstd, "-dcq"], input=stored, capture_output=True, check=False)
    if result.returncode != 0:
        raise FatbinError("zstd could not decompress a %s %s payload: %s"
                          % (entry.kind_name(), entry.arch_name(), result.stderr.decode(errors="replace").strip()))
    return result.stdout, None


def cubin_sm(cubin, where):
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise FatbinError("%s: ELF entry payload is not a 64-bit ELF cubin (first bytes %r)" % (where, cubin[:8]))
    osabi, abi_version = cubin[7], cubin[8]
    e_machine, = struct.unpack_from("<H", cubin, 0x12)
    e_flags, = struct.unpack_from("<I", cubin, 0x30)
    if e_machine != EM_CUDA or osabi != ELFOSABI_CUDA:
        raise FatbinError("%s: cubin has e_machine %d and EI_OSABI 0x%02X (expected %d and 0x%02X)"
                          % (where, e_machine, osabi, EM_CUDA, ELFOSABI_CUDA))
    sm = (e_flags >> 8) & 0xFF if abi_version >= 8 else e_flags & 0xFF
    return sm, e_flags


def cross_check(entry, payload, where):
    plain, reason = decompress(entry, payload)
    if plain is None:
        entry.confirmed_by = "entry header only (%s)" % reason
        return
    via = "zstd-decompressed " if entry.compressed else ""
    if entry.kind == KIND_ELF:
        sm, e_flags = cubin_sm(plain, where)
        if sm != entry.arch:
            raise FatbinError("%s: entry header says sm_%d but the cubin's e_flags 0x%08X say sm_%d"
                              % (where, entry.arch, e_flags, sm))
        entry.confirmed_by = "%scubin e_flags 0x%08X" % (via, e_flags)
    elif entry.kind == KIND_PTX:
        text = plain.decode("utf-8", "replace")
        match = re.search(r"^\s*\.target\s+(?:sm|compute)_(\d+)", text, re.MULTILINE)
        if match is None:
            raise FatbinError("%s: PTX entry for compute_%d has no .target directive" % (where, entry.arch))
        if int(match.group(1)) != entry.arch:
            raise FatbinError("%s: entry header says compute_%d but the PTX says .target sm_%s"
                              % (where, entry.arch, match.group(1)))
        entry.confirmed_by = "%sPTX .target sm_%s" % (via, match.group(1))


def list_file(path):
    with open(path, "rb") as handle:
        data = handle.read()
    entries = []
    for name, blob in fatbin_sections(data, path):
        entries += parse_fatbin(blob, "%s [%s]" % (path, name))
    return entries


def parse_archs(text):
    return sorted({int(item) for item in text.split(",") if item.strip()}) if text else []


def check(entries, expect_elf, expect_ptx, exact):
    """The problems (an empty list when the expectations hold)."""
    elf = sorted({e.arch for e in entries if e.kind == KIND_ELF})
    ptx = sorted({e.arch for e in entries if e.kind == KIND_PTX})
    problems = []
    for arch in expect_elf:
        if arch not in elf:
            problems.append("no sm_%d machine code (found ELF for %s)"
                            % (arch, ", ".join("sm_%d" % a for a in elf) or "nothing"))
    for arch in expect_ptx:
        if arch not in ptx:
            problems.append("no compute_%d PTX (found PTX for %s)"
                            % (arch, ", ".join("compute_%d" % a for a in ptx) or "nothing"))
    if exact:
        extra = ["ELF sm_%d" % a for a in elf if a not in expect_elf] + \
                ["PTX compute_%d" % a for a in ptx if a not in expect_ptx]
        extra += sorted({e.kind_name() for e in entries if e.kind not in (KIND_ELF, KIND_PTX)})
        if extra:
            problems.append("unexpected entries: %s" % ", ".join(extra))
    return problems


def print_problems(problems):
    for problem in problems:
        print("FAILED: %s" % problem)
    return not problems


def report(entries):
    for entry in entries:
        print(entry.describe())
    elf = sorted({e.arch for e in entries if e.kind == KIND_ELF})
    ptx = sorted({e.arch for e in entries if e.kind == KIND_PTX})
    print("summary: %d container(s), %d entries; ELF %s; PTX %s" % (
        len({e.container for e in entries}), len(entries),
        " ".join("sm_%d" % a for a in elf) or "none", " ".join("compute_%d" % a for a in ptx) or "none"))


SELF_TEST_SOURCE = r"""
__global__ void fatbin_probe_axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
"""


def self_test(nvcc):
    """Compiles a probe kernel with known targets and checks what the parser reads back."""
    both = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
    cases = [
        # (name, nvcc flags, expected ELF, expected PTX, every entry must be checked against its payload)
        ("default compression", both, [80, 90], [90], False),
        ("no compression", ["--no-compress"] + both, [80, 90], [90], True),
        ("everything compressed", ["-Xfatbin=-compress-all"] + both, [80, 90], [90], False),
        ("sm_80 only", ["-gencode", "arch=compute_80,code=sm_80"], [80], [], False),
        ("compute_80 PTX only", ["--no-compress", "-gencode", "arch=compute_80,code=compute_80"], [], [80], True),
    ]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="fatbin_archs_") as tmp:
        source = os.path.join(tmp, "probe.cu")
        with open(source, "w") as handle:
            handle.write(SELF_TEST_SOURCE)
        listed = {}
        for index, (name, flags, want_elf, want_ptx, want_payload_check) in enumerate(cases):
            obj = os.path.join(tmp, "probe%d.o" % index)
            command = [nvcc, "-c", source, "-o", obj] + flags
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                print("FAILED: %s exited %d:\n%s" % (" ".join(command), result.returncode, result.stderr))
                failures += 1
                continue
            print("== %s (nvcc %s)" % (name, " ".join(flags)))
            entries = list_file(obj)
            listed[name] = entries
            report(entries)
            if not print_problems(check(entries, want_elf, want_ptx, exact=True)):
                failures += 1
            unchecked = [e.describe() for e in entries if e.confirmed_by.startswith("entry header only")]
            if want_payload_check and unchecked:
                print("FAILED: uncompressed entries not checked against their payload: %s" % "; ".join(unchecked))
                failures += 1
        # The checker itself has to fail on a file that lacks sm_90 and compute_90.
        if "sm_80 only" in listed:
            problems = check(listed["sm_80 only"], [80, 90], [90], exact=False)
            print("== negative: 'sm_80 only' checked for sm_80, sm_90 and compute_90")
            for problem in problems:
                print("reported as expected: %s" % problem)
            if len(problems) != 2:
                print("FAILED: expected sm_90 and compute_90 reported missing, got %d problem(s)" % len(problems))
                failures += 1
        # An entry header that contradicts its cubin must be caught: claim sm_86 for the sm_80 cubin.
        plain = os.path.join(tmp, "probe1.o")
        if os.path.exists(plain):
            with open(plain, "rb") as handle:
                _, blob = fatbin_sections(handle.read(), plain)[0]
            forged = bytearray(blob)
            position = struct.unpack_from("<H", forged, 6)[0]  # first entry, after the container header
            while struct.unpack_from("<H", forged, position)[0] != KIND_ELF:
                position += sum(struct.unpack_from("<IQ", forged, position + 4))
            struct.pack_into("<I", forged, position + 28, 86)
            print("== negative: 'no compression' with the first ELF entry header changed to sm_86")
            try:
                parse_fatbin(bytes(forged), "forged fatbin")
                print("FAILED: the contradiction between entry header and cubin e_flags went unnoticed")
                failures += 1
            except FatbinError as error:
                print("reported as expected: %s" % error)
    if failures:
        print("self-test: %d case(s) FAILED" % failures)
        return 1
    print("self-test: passed")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", help="host ELF file or raw .fatbin")
    parser.add_argument("--expect-elf", default="", help="comma-separated SM numbers that must have machine code")
    parser.add_argument("--expect-ptx", default="", help="comma-separated SM numbers that must have PTX")
    parser.add_argument("--exact", action="store_true", help="also fail on architectures not expected")
    parser.add_argument("--self-test", metavar="NVCC", help="compile probe kernels with NVCC and check the parser")
    args = parser.parse_args()
    try:
        if args.self_test:
            return self_test(args.self_test)
        if not args.file:
            parser.error("a FILE or --self-test NVCC is required")
        entries = list_file(args.file)
        report(entries)
        problems = check(entries, parse_archs(args.expect_elf), parse_archs(args.expect_ptx), args.exact)
        return 0 if print_problems(problems) else 1
    except FatbinError as error:
        print("ERROR: %s" % error)
        return 2


if __name__ == "__main__":
    sys.exit(main())
