package ctlbin

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strings"
)

// machines maps a sandbox architecture to its ELF machine.
var machines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// machineName names an ELF machine for people.
func machineName(m elf.Machine) string {
	switch m {
	case elf.EM_X86_64:
		return "x86-64 (linux/amd64)"
	case elf.EM_AARCH64:
		return "aarch64 (linux/arm64)"
	case elf.EM_386:
		return "i386"
	case elf.EM_ARM:
		return "32-bit arm"
	case elf.EM_RISCV:
		return "riscv"
	}
	return strings.TrimPrefix(m.String(), "EM_")
}

// Check says why data is not a sandbox-ctl that a linux/arch sandbox can
// run, or returns nil: it must be a whole 64-bit ELF executable for that
// machine, statically linked (no program interpreter), and a Go build of
// cmd/sandbox-ctl for linux/arch.
func Check(data []byte, arch string) error {
	want, ok := machines[arch]
	if !ok {
		return fmt.Errorf("sandbox-ctl is built for linux/amd64 and linux/arm64 only, not linux/%s", arch)
	}
	switch {
	case len(data) == 0:
		return fmt.Errorf("an empty file, not a linux executable")
	case len(data) < 4 || string(data[:4]) != elf.ELFMAG:
		return fmt.Errorf("not a linux executable (not ELF: it starts with %q)", data[:min(len(data), 16)])
	}
	if len(data) < 64 {
		return fmt.Errorf("truncated: %d bytes, shorter than an ELF header", len(data))
	}
	if elf.Class(data[elf.EI_CLASS]) != elf.ELFCLASS64 {
		return fmt.Errorf("a 32-bit ELF file, not a 64-bit one for %s", machineName(want))
	}
	// The machine first: a file for another one is that, cut short or not.
	if m := elf.Machine(byteOrder(data).Uint16(data[0x12:])); m != want {
		return fmt.Errorf("an executable for %s, not for %s", machineName(m), machineName(want))
	}
	if end := fileEnd(data); end > uint64(len(data)) {
		return fmt.Errorf("truncated: %d bytes, but its headers describe %d", len(data), end)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("a damaged ELF file: %v", err)
	}
	if f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		return fmt.Errorf("an executable for %s, not for linux", strings.TrimPrefix(f.OSABI.String(), "ELFOSABI_"))
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("not an executable (ELF type %s)", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("dynamically linked (it needs a program interpreter): build it static, with CGO_ENABLED=0")
		}
	}
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not sandbox-ctl (no Go build information: %v)", err)
	}
	if bi.Path != CtlPackage {
		return fmt.Errorf("not sandbox-ctl but a build of %q", bi.Path)
	}
	for _, s := range bi.Settings {
		switch {
		case s.Key == "GOOS" && s.Value != "linux":
			return fmt.Errorf("sandbox-ctl built for GOOS=%s, not linux", s.Value)
		case s.Key == "GOARCH" && s.Value != arch:
			return fmt.Errorf("sandbox-ctl built for GOARCH=%s, not %s", s.Value, arch)
		}
	}
	return nil
}

// byteOrder is the byte order of an ELF file's header.
func byteOrder(data []byte) binary.ByteOrder {
	if elf.Data(data[elf.EI_DATA]) == elf.ELFDATA2MSB {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// fileEnd is where the content of a 64-bit ELF file (at least a header
// long) ends, as its headers say: its header tables, sections and
// segments; more than len(data) for a file cut short.
func fileEnd(data []byte) uint64 {
	bo := byteOrder(data)
	size := uint64(len(data))
	end := uint64(64)
	// table reads n entries of entsize at off, calling each on those that
	// lie in the file.
	table := func(off, entsize, n uint64, minsize uint64, each func(e []byte)) {
		if n == 0 {
			return
		}
		end = max(end, off+entsize*n)
		if entsize < minsize {
			return
		}
		for i := uint64(0); i < n; i++ {
			if o := off + i*entsize; o+entsize <= size {
				each(data[o : o+entsize])
			}
		}
	}
	table(bo.Uint64(data[0x20:]), uint64(bo.Uint16(data[0x36:])), uint64(bo.Uint16(data[0x38:])), 56, func(e []byte) {
		end = max(end, bo.Uint64(e[0x08:])+bo.Uint64(e[0x20:])) // p_offset + p_filesz
	})
	table(bo.Uint64(data[0x28:]), uint64(bo.Uint16(data[0x3a:])), uint64(bo.Uint16(data[0x3c:])), 64, func(e []byte) {
		if t := elf.SectionType(bo.Uint32(e[0x04:])); t != elf.SHT_NOBITS && t != elf.SHT_NULL {
			end = max(end, bo.Uint64(e[0x18:])+bo.Uint64(e[0x20:])) // sh_offset + sh_size
		}
	})
	return end
}

// builtVersion is the sandbox-mcp module version data was built from, or
// "" when it does not say.
func builtVersion(data []byte) string {
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		return ""
	}
	return moduleVersion(bi.Main, bi.Deps)
}
