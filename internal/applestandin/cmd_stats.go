package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

// statsInterval is the gap between Apple's two samples.
const statsInterval = 2 * time.Second

// podStats is podman's raw per-container sample ({{json .ContainerStats}}).
type podStats struct {
	ContainerID string `json:"ContainerID"`
	Name        string `json:"Name"`
	CPUNano     uint64 `json:"CPUNano"`
	MemUsage    uint64 `json:"MemUsage"`
	MemLimit    uint64 `json:"MemLimit"`
	NetInput    uint64 `json:"NetInput"`
	NetOutput   uint64 `json:"NetOutput"`
	BlockInput  uint64 `json:"BlockInput"`
	BlockOutput uint64 `json:"BlockOutput"`
	PIDs        uint64 `json:"PIDs"`
}

// sample takes one podman stats sample of ids; containers that stopped or
// vanished meanwhile are left out.
func (a *app) sample(ids []string) map[string]podStats {
	out := map[string]podStats{}
	if len(ids) == 0 {
		return out
	}
	parse := func(b []byte) {
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			var s podStats
			if json.Unmarshal(sc.Bytes(), &s) == nil && s.Name != "" {
				out[s.Name] = s
			}
		}
	}
	args := []string{"stats", "--no-stream", "--format", "{{json .ContainerStats}}"}
	r := a.eng.run(append(args, ids...)...)
	if r.ok() {
		parse(r.stdout)
		return out
	}
	for _, id := range ids { // one of them went away: sample the rest one by one
		if r := a.eng.run(append(args, id)...); r.ok() {
			parse(r.stdout)
		}
	}
	return out
}

// cmdStats prints resource usage: two samples 2 s apart, JSON or table.
func cmdStats(a *app, p *parsed) error {
	format, err := a.checkFormat(p)
	if err != nil {
		return err
	}
	if err := a.up(opListContainers); err != nil {
		return err
	}
	var ids []string
	if len(p.Pos) > 0 {
		cs, err := a.eng.inspectContainers(p.Pos...)
		if err != nil {
			return err
		}
		byName := map[string]*podContainer{}
		for i := range cs {
			byName[cs[i].Name] = &cs[i]
		}
		var all []podContainer
		for _, id := range p.Pos {
			c := byName[id]
			if c == nil && a.v.Before("0.10.0") {
				// ContainerStats.swift@0.9.0 takes the first container whose
				// id starts with the one given.
				if all == nil {
					if all, err = a.eng.listContainers(true); err != nil {
						return err
					}
					sort.SliceStable(all, func(i, j int) bool { return all[i].Created.Before(all[j].Created) })
				}
				for i := range all {
					if strings.HasPrefix(all[i].Name, id) {
						c = &all[i]
						break
					}
				}
			}
			if c == nil {
				return a.fail("notFound", "no such container: "+id)
			}
			if c.State.Running {
				ids = append(ids, c.Name)
			}
		}
	} else {
		cs, err := a.eng.listContainers(false)
		if err != nil {
			return err
		}
		for _, c := range cs {
			ids = append(ids, c.Name)
		}
	}
	if format == "table" && !p.Has("no-stream") {
		if len(p.Pos) > 0 {
			return a.streamStats(func() []string { return ids })
		}
		return a.streamStats(a.runningIDs)
	}
	first, second := a.samples(ids)
	if format == "json" {
		arr := []any{}
		for _, id := range ids {
			if s, ok := second[id]; ok {
				arr = append(arr, statsJSON(id, s))
			}
		}
		a.printJSON(arr, false)
		return nil
	}
	fmt.Fprintln(a.stdout, renderTable(statsRows(ids, first, second)))
	return nil
}

// samples is ContainerStats.collectStats (Container/ContainerStats.swift,
// 0.8.0–1.2.2): a first sample of each container (those that fail are
// left out), and 2 s later, if any, a second one, which keeps the first
// where it fails.
func (a *app) samples(ids []string) (first, second map[string]podStats) {
	first = a.sample(ids)
	second = map[string]podStats{}
	if len(first) == 0 {
		return first, second
	}
	time.Sleep(statsInterval)
	again := a.sample(ids)
	for id, s := range first {
		if s2, ok := again[id]; ok {
			second[id] = s2
		} else {
			second[id] = s
		}
	}
	return first, second
}

// statsJSON is one stats entry; built in the 0.x key order of samples §3.4.
func statsJSON(id string, s podStats) *Obj {
	return NewObj().
		Set("id", id).
		Set("memoryUsageBytes", s.MemUsage).
		Set("memoryLimitBytes", s.MemLimit).
		Set("cpuUsageUsec", s.CPUNano/1000).
		Set("blockReadBytes", s.BlockInput).
		Set("numProcesses", s.PIDs).
		Set("blockWriteBytes", s.BlockOutput).
		Set("networkRxBytes", s.NetInput).
		Set("networkTxBytes", s.NetOutput)
}

// statsRows is the stats table (samples §3.5, reconstructed layout).
func statsRows(ids []string, first, second map[string]podStats) [][]string {
	rows := [][]string{{"Container ID", "Cpu %", "Memory Usage", "Net Rx/Tx", "Block I/O", "Pids"}}
	for _, id := range ids {
		s, ok := second[id]
		if !ok {
			continue
		}
		// calculateCPUPercent: the cpuUsageUsec delta (0 if it went back)
		// over a fixed 2 s, "%.2f%%".
		cpu := "--"
		if f, ok := first[id]; ok {
			u1, u2 := f.CPUNano/1000, s.CPUNano/1000
			delta := uint64(0)
			if u2 > u1 {
				delta = u2 - u1
			}
			cpu = fmt.Sprintf("%.2f%%", float64(delta)/float64(statsInterval.Microseconds())*100)
		}
		rows = append(rows, []string{id, cpu,
			binBytes(s.MemUsage) + " / " + binBytes(s.MemLimit),
			binBytes(s.NetInput) + " / " + binBytes(s.NetOutput),
			binBytes(s.BlockInput) + " / " + binBytes(s.BlockOutput),
			fmt.Sprint(s.PIDs)})
	}
	return rows
}

// binBytes formats like the stats table: %.2f with KiB, MiB or GiB.
func binBytes(n uint64) string {
	f := float64(n)
	switch {
	case f >= 1<<30:
		return fmt.Sprintf("%.2f GiB", f/(1<<30))
	case f >= 1<<20:
		return fmt.Sprintf("%.2f MiB", f/(1<<20))
	default:
		return fmt.Sprintf("%.2f KiB", f/(1<<10))
	}
}

// streamStats redraws the table until interrupted, as
// ContainerStats.runStreaming does (0.8.0–1.2.2): the alternate screen
// with the cursor hidden ("\e[?1049h\e[?25l", undone on exit), the screen
// cleared ("\e[H\e[J") and the header printed at once, then each round's
// table, cleared before it; each round takes the two samples 2 s apart.
func (a *app) streamStats(list func() []string) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	const clear = "\x1b[H\x1b[J"
	fmt.Fprint(a.stdout, "\x1b[?1049h\x1b[?25l")
	defer fmt.Fprint(a.stdout, "\x1b[?25h\x1b[?1049l")
	fmt.Fprint(a.stdout, clear+renderTable(statsRows(nil, nil, nil))+"\n")
	for {
		// reconstructed: a failing round prints "error collecting stats:
		// <error>"; podman's failures are left out of the sample instead.
		ids := list()
		done := make(chan [2]map[string]podStats, 1)
		go func() {
			f, s := a.samples(ids)
			done <- [2]map[string]podStats{f, s}
		}()
		select {
		case <-sig:
			return nil
		case r := <-done:
			fmt.Fprint(a.stdout, clear+renderTable(statsRows(ids, r[0], r[1]))+"\n")
			if len(r[0]) == 0 {
				select {
				case <-sig:
					return nil
				case <-time.After(statsInterval):
				}
			}
		}
	}
}

// runningIDs lists the running containers (each streaming round does).
func (a *app) runningIDs() []string {
	cs, err := a.eng.listContainers(false)
	if err != nil {
		return nil
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Created.Before(cs[j].Created) })
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.Name
	}
	return ids
}
