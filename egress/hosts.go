package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
)

// HostsResolver answers the names of a hosts table itself and asks Next
// for the others (none: they are not found). Users pin names with it;
// tests resolve their names without any DNS.
type HostsResolver struct {
	Hosts map[string][]netip.Addr
	Next  Resolver
}

// LookupNetIP resolves host from the table, else through Next.
func (r *HostsResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if as, ok := r.Hosts[strings.ToLower(strings.TrimSuffix(host, "."))]; ok {
		return as, nil
	}
	if r.Next == nil {
		return nil, &net.DNSError{Err: "not in the hosts table", Name: host, IsNotFound: true}
	}
	return r.Next.LookupNetIP(ctx, network, host)
}

// maxHostsFile bounds a hosts file read.
const maxHostsFile = 4 << 20

// ReadHostsFile reads a file in /etc/hosts form: an address, then the
// names it answers for; '#' starts a comment.
func ReadHostsFile(path string) (map[string][]netip.Addr, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hosts file: %w", err)
	}
	defer f.Close()
	out := map[string][]netip.Addr{}
	sc := bufio.NewScanner(io.LimitReader(f, maxHostsFile))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil || len(fields) < 2 {
			return nil, fmt.Errorf("hosts file %s line %d: want an address and names", path, n)
		}
		for _, name := range fields[1:] {
			name = strings.ToLower(strings.TrimSuffix(name, "."))
			if err := checkHostName(name); err != nil {
				return nil, fmt.Errorf("hosts file %s line %d: %q: %w", path, n, name, err)
			}
			out[name] = append(out[name], a.Unmap())
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("hosts file %s: %w", path, err)
	}
	return out, nil
}
