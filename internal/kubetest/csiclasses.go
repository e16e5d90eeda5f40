package kubetest

import "k8s.io/apimachinery/pkg/runtime/schema"

// CSISidecarsVersion names the releases of external-provisioner and
// external-snapshotter whose programs and snapshot resources the tests run
// (scripts/build-kube-apiserver.sh builds them beside the apiserver).
const CSISidecarsVersion = "v6.4.0-v8.7.0"

// The classes StartCSI makes: volumes of the test driver, bound at once
// or late, and snapshots of them.
const (
	CSIStorageClass  = "kubetest-csi"
	CSISnapshotClass = "kubetest-csi-snapshots"
	// CSILateStorageClass binds a claim once a pod that uses it is
	// scheduled (WaitForFirstConsumer), as many clusters' default does.
	CSILateStorageClass = "kubetest-csi-late"
)

// VolumeSnapshots is the VolumeSnapshot resource.
var VolumeSnapshots = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
