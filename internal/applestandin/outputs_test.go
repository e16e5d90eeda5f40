package main

import (
	"encoding/json"
	"testing"
)

// statsFromSample reads a captured stats array back into podman samples,
// in its order, so that the stand-in can render the same values.
func statsFromSample(t *testing.T, js string) ([]string, map[string]podStats) {
	t.Helper()
	var entries []struct {
		ID               string `json:"id"`
		MemoryUsageBytes uint64 `json:"memoryUsageBytes"`
		MemoryLimitBytes uint64 `json:"memoryLimitBytes"`
		CPUUsageUsec     uint64 `json:"cpuUsageUsec"`
		NetworkRxBytes   uint64 `json:"networkRxBytes"`
		NetworkTxBytes   uint64 `json:"networkTxBytes"`
		BlockReadBytes   uint64 `json:"blockReadBytes"`
		BlockWriteBytes  uint64 `json:"blockWriteBytes"`
		NumProcesses     uint64 `json:"numProcesses"`
	}
	if err := json.Unmarshal([]byte(js), &entries); err != nil {
		t.Fatal(err)
	}
	var ids []string
	m := map[string]podStats{}
	for _, e := range entries {
		ids = append(ids, e.ID)
		m[e.ID] = podStats{Name: e.ID, CPUNano: e.CPUUsageUsec * 1000, MemUsage: e.MemoryUsageBytes, MemLimit: e.MemoryLimitBytes,
			NetInput: e.NetworkRxBytes, NetOutput: e.NetworkTxBytes, BlockInput: e.BlockReadBytes, BlockOutput: e.BlockWriteBytes, PIDs: e.NumProcesses}
	}
	return ids, m
}

// TestStatsOutputs: `stats --format json` is one compact array of
// ContainerStats (ContainerResource/Container/ContainerStats.swift),
// byte for byte the captures of samples §3 (1.x sorted; 0.12.3 in its
// capture's key order, slashes unescaped there); the table follows
// ContainerStats.statsTable (0.8.0–1.2.2).
func TestStatsOutputs(t *testing.T) {
	for _, tc := range []struct{ version, file string }{
		{"1.0.0", "stats-1.0.0.json"},   // samples §3.1
		{"1.2.0", "stats-1.2.0.json"},   // samples §3.2
		{"1.4.1", "stats-1.4.1.json"},   // samples §3.3, five containers
		{"0.12.3", "stats-0.12.3.json"}, // samples §3.4
	} {
		want := readTestdata(t, tc.file)
		ids, m := statsFromSample(t, want)
		arr := []any{}
		for _, id := range ids {
			arr = append(arr, statsJSON(id, m[id]))
		}
		if got := string(encodingFor(MustVersion(tc.version)).Compact(arr)); got != want {
			t.Errorf("%s differs\n%s", tc.file, firstDiff(got, want))
		}
	}

	// The table: "%.2f%%" of the CPU time over 2 s, 1024-based sizes with
	// two decimals in KiB, MiB or GiB, "--" where a value is missing.
	first := map[string]podStats{"web": {CPUNano: 1_000_000_000}}
	second := map[string]podStats{"web": {CPUNano: 1_609_000_000, MemUsage: 47_426_683, MemLimit: 1 << 30,
		NetInput: 1_289_748, NetOutput: 876_544, BlockInput: 4_718_592, BlockOutput: 2_202_010, PIDs: 3}}
	want := "Container ID  Cpu %   Memory Usage          Net Rx/Tx              Block I/O            Pids\n" +
		"web           30.45%  45.23 MiB / 1.00 GiB  1.23 MiB / 856.00 KiB  4.50 MiB / 2.10 MiB  3"
	if got := renderTable(statsRows([]string{"web"}, first, second)); got != want {
		t.Errorf("table\n%s\nwant\n%s", got, want)
	}
	// A CPU time that went back shows 0.00% (calculateCPUPercent).
	second["web"] = podStats{CPUNano: 1}
	if got := statsRows([]string{"web"}, first, second)[1][1]; got != "0.00%" {
		t.Errorf("cpu gone back: %q", got)
	}
	if got := renderTable(statsRows(nil, nil, nil)); got != "Container ID  Cpu %  Memory Usage  Net Rx/Tx  Block I/O  Pids" {
		t.Errorf("header: %q", got)
	}
}
