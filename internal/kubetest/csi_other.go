//go:build !linux

package kubetest

import (
	"context"
	"testing"
)

// CSI is the CSI storage of a cluster, which runs on Linux only (the test
// driver's node service bind-mounts).
type CSI struct{}

// CSIMissing says what is missing for StartCSI.
func CSIMissing() string { return "the CSI storage runs on Linux only" }

// RunCSI skips the test: the CSI storage runs on Linux only.
func (c *Cluster) RunCSI(t *testing.T) *CSI {
	t.Helper()
	t.Skip(CSIMissing())
	return nil
}

// StartCSI says the CSI storage runs on Linux only.
func (c *Cluster) StartCSI() (*CSI, func() string, string, error) {
	return nil, nil, CSIMissing(), nil
}

func (c *Cluster) csiStorage() *CSI { return c.csi.Load() }

func (s *CSI) unpublish(string) {}

func (k *Kubelet) publishClaim(context.Context, string, string, string, bool) (string, error) {
	return "", nil
}
