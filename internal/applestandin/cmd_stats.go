package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
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
		for _, id := range p.Pos {
			c := byName[id]
			if c == nil {
				return a.fail("notFound", "no such container: "+id)
			}
			if c.State.Running {
				ids = append(ids, id)
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
		return a.streamStats(ids)
	}
	first := a.sample(ids)
	time.Sleep(statsInterval)
	second := a.sample(ids)
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
		cpu := "--"
		if f, ok := first[id]; ok && s.CPUNano >= f.CPUNano {
			pct := float64(s.CPUNano-f.CPUNano) / float64(statsInterval.Nanoseconds()) * 100
			cpu = fmt.Sprintf("%.2f%%", pct)
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

// streamStats redraws the table every interval on the alternate screen
// until interrupted.
func (a *app) streamStats(ids []string) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	fmt.Fprint(a.stdout, "\x1b[?1049h")
	defer fmt.Fprint(a.stdout, "\x1b[?1049l")
	prev := a.sample(ids)
	for {
		select {
		case <-sig:
			return nil
		case <-time.After(statsInterval):
		}
		cur := a.sample(ids)
		fmt.Fprint(a.stdout, "\x1b[H\x1b[2J"+renderTable(statsRows(ids, prev, cur))+"\n")
		prev = cur
	}
}
