package main

import "github.com/sandbox-mcp/sandbox-mcp/internal/applecli"

// The value rules (labels, sizes) are the tables' (internal/applecli).

// failure is a command's thrown error as the emulated release prints it.
func (a *app) failure(f *applecli.Failure) error {
	return &exitError{exitFailure, f.Text(a.v)}
}

// parseRunLabels is applecli.RunLabels (Parser.labels) with the release's error text.
func (a *app) parseRunLabels(raw []string) (map[string]string, error) {
	m, f := applecli.RunLabels(raw)
	if f != nil {
		return nil, a.failure(f)
	}
	return m, nil
}

// parseKeyValuePairs is Utility.parseKeyValuePairs.
func parseKeyValuePairs(raw []string) map[string]string { return applecli.KeyValuePairs(raw) }

// memoryMiB and sizeBytes are Measurement.parse in whole MiB and bytes.
func memoryMiB(s string) (int64, error) { return applecli.MemoryMiB(s) }
func sizeBytes(s string) (int64, error) { return applecli.SizeBytes(s) }
