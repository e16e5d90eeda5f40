package spawn

import (
	"fmt"
	"math"
	"sort"
	"testing"
	"time"
)

// FuzzFamily grows and prunes families under random policies and requests
// and checks, after every allowed spawn, that no parent and no root is
// over any of its limits, that no family is too deep, and that no child
// outlives its parent.
func FuzzFamily(f *testing.F) {
	f.Add([]byte{3, 10, 6, 2, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte{1, 1, 1, 1, 0, 255, 255, 255, 0, 0, 0, 128, 64, 32})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return int(b)
		}
		p := DefaultPolicy()
		p.MaxConcurrent = 1 + next()%5
		p.MaxTotal = p.MaxConcurrent + next()%10
		p.TotalChildCPUs = float64(1+next()%16) / 2
		p.ChildMaxCPUs = math.Min(float64(1+next()%8)/2, p.TotalChildCPUs)
		p.TotalChildMemory = Bytes(64+next()*16) << 20
		p.ChildMaxMemory = min(Bytes(64+next()*4)<<20, p.TotalChildMemory)
		p.ChildCanSpawn = next()%2 == 0
		p.ChildTTL = Duration(time.Duration(1+next()) * time.Minute)
		if p.Validate() != nil {
			return
		}
		fam := Family{"default": {Name: "default", Policy: &p}}
		now := t0
		for op := 0; len(data) > 0 && op < 200; op++ {
			names := make([]string, 0, len(fam))
			for n := range fam {
				names = append(names, n)
			}
			sort.Strings(names)
			switch next() % 4 {
			case 0: // a child goes (destroyed, or its life ended)
				if n := names[next()%len(names)]; n != "default" {
					removeTree(fam, n)
				}
			case 1:
				now = now.Add(time.Duration(next()) * 10 * time.Second)
				for _, n := range names {
					if m, ok := fam[n]; ok && !m.Expires.IsZero() && !now.Before(m.Expires) {
						removeTree(fam, n)
					}
				}
			default:
				req := Request{Parent: names[next()%len(names)], CPUs: float64(next()%12) / 4}
				if k := next() % 3; k > 0 {
					req.Memory = fmt.Sprintf("%dM", next()*8)
				}
				d, err := Decide(fam, req, now, nil)
				if err != nil {
					continue
				}
				parent := fam[req.Parent]
				if d.CPUs <= 0 || d.CPUs > parent.Policy.ChildMaxCPUs || d.Memory < MinMemory || d.Memory > parent.Policy.ChildMaxMemory {
					t.Fatalf("child %+v outside the per-child limits of %+v", d, parent.Policy)
				}
				if !parent.Expires.IsZero() && d.Expires.After(parent.Expires) {
					t.Fatalf("child %s outlives its parent", d.Name)
				}
				if _, taken := fam[d.Name]; taken {
					t.Fatalf("name %s given twice", d.Name)
				}
				parent.Spawned++
				fam[req.Parent] = parent
				fam[d.Name] = Member{Name: d.Name, Parent: req.Parent, CPUs: d.CPUs, Memory: d.Memory, Expires: d.Expires, Policy: d.Policy}
				checkFamily(t, fam)
			}
		}
	})
}

// removeTree removes name and its descendants, as destroying a parent does.
func removeTree(f Family, name string) {
	for n, m := range f {
		if m.Parent == name {
			removeTree(f, n)
		}
	}
	delete(f, name)
}

func checkFamily(t *testing.T, f Family) {
	t.Helper()
	for name, m := range f {
		chain, err := ancestry(f, name)
		if err != nil || len(chain) > MaxDepth+1 {
			t.Fatalf("%s: chain %v %v", name, chain, err)
		}
		if m.Policy == nil {
			continue
		}
		live, cpus, mem := sums(f, func(c Member) bool { return c.Parent == name })
		if live > m.Policy.MaxConcurrent || m.Spawned > m.Policy.MaxTotal || cpus > m.Policy.TotalChildCPUs+epsilon || mem > m.Policy.TotalChildMemory {
			t.Fatalf("%s over its limits: %d live, %d spawned, %g cpus, %s (policy %+v)", name, live, m.Spawned, cpus, mem, m.Policy)
		}
		if m.Parent == "" {
			_, cpus, mem := sums(f, func(c Member) bool { return descends(f, c.Name, name) })
			if cpus > m.Policy.TotalChildCPUs+epsilon || mem > m.Policy.TotalChildMemory {
				t.Fatalf("the family of %s over its envelope: %g cpus, %s", name, cpus, mem)
			}
		}
	}
}

// FuzzDerive: a derived policy never grants more than the one it comes
// from, and never less than its floors.
func FuzzDerive(f *testing.F) {
	f.Add(3, 10, 6.0, 2.0, int64(1536<<20), int64(512<<20), int64(300))
	f.Fuzz(func(t *testing.T, conc, total int, tcpu, ccpu float64, tmem, cmem, leftSecs int64) {
		p := DefaultPolicy()
		p.MaxConcurrent, p.MaxTotal, p.TotalChildCPUs, p.ChildMaxCPUs = conc, total, tcpu, ccpu
		p.TotalChildMemory, p.ChildMaxMemory = Bytes(tmem), Bytes(cmem)
		if p.Validate() != nil || p.TotalChildCPUs > 1e6 || p.TotalChildMemory > 1<<50 {
			return
		}
		d := Derive(p, time.Duration(leftSecs)*time.Second)
		if d.MaxConcurrent > max(p.MaxConcurrent, 1) || d.MaxTotal > p.MaxTotal || d.MaxConcurrent < 1 || d.MaxTotal < 1 {
			t.Fatalf("counts %+v from %+v", d, p)
		}
		if d.TotalChildCPUs > math.Max(p.TotalChildCPUs, 1) || d.ChildMaxCPUs > d.TotalChildCPUs || d.ChildMaxCPUs <= 0 {
			t.Fatalf("cpus %+v from %+v", d, p)
		}
		if d.TotalChildMemory > max(p.TotalChildMemory, MinDerivedMemory) || d.ChildMaxMemory > d.TotalChildMemory || d.ChildMaxMemory < MinMemory {
			t.Fatalf("memory %+v from %+v", d, p)
		}
		if d.ChildTTL > p.ChildTTL || d.ChildTTL < 0 || d.ChildCanSpawn || !d.InjectCtl || d.ChildAllowPortForward {
			t.Fatalf("the rest %+v from %+v", d, p)
		}
	})
}
