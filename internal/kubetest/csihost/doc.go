// Package csihost is a CSI driver for the test cluster's one node: each
// volume a directory on the host, each snapshot a full copy of one, a
// volume made from a snapshot a copy of that. It is what
// csi-driver-host-path is to Kubernetes' own tests (that driver is not on
// the module proxy these machines reach): storage for the sidecars that
// turn PersistentVolumeClaims and VolumeSnapshots into CSI calls
// (external-provisioner, external-snapshotter), so the Kubernetes runtime
// meets real VolumeSnapshots. csi-test's sanity suite checks it against
// the CSI spec (csihost_test.go).
//
// Capacity is recorded, not enforced: like hostPath, a volume holds what
// the host's filesystem holds.
//
// The driver serves on Linux only: its node service bind-mounts.
package csihost
