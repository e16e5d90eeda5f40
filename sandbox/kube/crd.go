package kube

// Sandbox mode: where the cluster runs agent-sandbox
// (sigs.k8s.io/agent-sandbox), each sandbox's pod is made by its
// controller from a Sandbox resource (agents.x-k8s.io/v1beta1) the runtime
// writes, rather than by the runtime itself. The record (a ConfigMap) stays
// the runtime's: it owns the Sandbox, which owns the pod, so a record's
// deletion still takes everything with it. A stop is the Sandbox's
// operatingMode Suspended (its controller deletes the pod; the runtime
// deletes it too, with the grace the stop asked for), a start its mode
// Running (the controller makes the pod again). The workspace claim is the
// runtime's, as in pod mode: a Sandbox's volumeClaimTemplates would name
// claims after it, and the runtime's claims outlive a removal for a
// snapshot or a restore.
//
// The fields written and read are those of agent-sandbox v1.0.1's
// api/v1beta1 (SandboxSpec: podTemplate, operatingMode, service); the
// controller names the pod after the Sandbox and makes itself the pod's
// controlling owner.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// SandboxResource is agent-sandbox's Sandbox.
var SandboxResource = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}

const (
	sandboxAPIVersion = "agents.x-k8s.io/v1beta1"
	sandboxKind       = "Sandbox"
	modeRunning       = "Running"
	modeSuspended     = "Suspended"
)

// sandboxObject is the part of a Sandbox the runtime writes and reads.
type sandboxObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              sandboxSpec   `json:"spec"`
	Status            sandboxStatus `json:"status,omitempty"`
}

type sandboxSpec struct {
	PodTemplate   sandboxPodTemplate `json:"podTemplate"`
	OperatingMode string             `json:"operatingMode,omitempty"`
	// Service false: no Service for the pod; forwards reach it through
	// the agent.
	Service *bool `json:"service,omitempty"`
}

type sandboxPodTemplate struct {
	Spec     corev1.PodSpec     `json:"spec"`
	Metadata sandboxPodMetadata `json:"metadata"`
}

type sandboxPodMetadata struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type sandboxStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// sandboxes is the namespace's Sandbox client.
func (r *Runtime) sandboxes() dynamic.ResourceInterface {
	return r.dyn.Resource(SandboxResource).Namespace(r.opt.Namespace)
}

// getSandbox reads the Sandbox named name, nil when there is none.
func (r *Runtime) getSandbox(ctx context.Context, name string) (*sandboxObject, error) {
	u, err := r.sandboxes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if isNoResource(err) {
			return nil, r.noSandboxResource(err)
		}
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("kubernetes: read the Sandbox %s: %w", name, err)
	}
	return fromUnstructured(u)
}

// isNoResource reports whether a NotFound is the resource's (agent-sandbox
// not installed), not the object's.
func isNoResource(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	d := st.Status().Details
	return d == nil || d.Name == ""
}

func (r *Runtime) noSandboxResource(err error) error {
	return fmt.Errorf("kubernetes: the cluster has no %s resource (sandbox mode needs agent-sandbox installed: its CRDs and controller): %w", SandboxResource.GroupResource(), err)
}

func fromUnstructured(u *unstructured.Unstructured) (*sandboxObject, error) {
	var sb sandboxObject
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sb); err != nil {
		return nil, fmt.Errorf("kubernetes: the Sandbox %s: %w", u.GetName(), err)
	}
	return &sb, nil
}

// ownedBy reports whether o has an owner reference to the object of uid.
func ownedBy(o metav1.Object, uid types.UID) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

// withSandbox sets rec.podOwner, in sandbox mode, to the UID of the
// Sandbox rec's record owns; a Sandbox of that name it does not own is
// none of its (podOwner stays empty, and no pod passes madeBy).
func (r *Runtime) withSandbox(ctx context.Context, rec record) (record, error) {
	if r.dyn == nil {
		return rec, nil
	}
	sb, err := r.getSandbox(ctx, rec.cm.Name)
	if err != nil {
		return rec, err
	}
	if sb != nil && ownedBy(sb, rec.cm.UID) {
		rec.podOwner = sb.UID
	}
	return rec, nil
}

// sandboxOwners maps the name of each Sandbox a record owns to the UIDs
// of that record and of the Sandbox: List's one read for every record.
func (r *Runtime) sandboxOwners(ctx context.Context) (map[string][2]types.UID, error) {
	list, err := r.sandboxes().List(ctx, metav1.ListOptions{LabelSelector: labelManaged + "=" + managedBy})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, r.noSandboxResource(err)
		}
		return nil, fmt.Errorf("kubernetes: list Sandboxes: %w", err)
	}
	out := map[string][2]types.UID{}
	for i := range list.Items {
		u := &list.Items[i]
		for _, ref := range u.GetOwnerReferences() {
			if ref.Kind == "ConfigMap" && ref.Name == u.GetName() {
				out[u.GetName()] = [2]types.UID{ref.UID, u.GetUID()}
			}
		}
	}
	return out, nil
}

// startThroughSandbox has agent-sandbox's controller make pod (the pod
// the runtime would make itself): it writes the record's Sandbox, or sets
// the one there running, waits for the controller's pod and then for it to
// run.
func (r *Runtime) startThroughSandbox(ctx context.Context, rec record, pod *corev1.Pod) (*corev1.Pod, error) {
	sb, err := r.getSandbox(ctx, pod.Name)
	if err != nil {
		return nil, err
	}
	switch {
	case sb == nil:
		if sb, err = r.createSandbox(ctx, rec, pod); err != nil {
			return nil, err
		}
	case !ownedBy(sb, rec.cm.UID):
		return nil, fmt.Errorf("container %s: a Sandbox named %s is there already and is not one this record made: %w", rec.spec.Name, pod.Name, sandbox.ErrInUse)
	case sb.Spec.OperatingMode == modeSuspended:
		if err := r.setMode(ctx, sb, modeRunning); err != nil {
			return nil, err
		}
	}
	rec.podOwner = sb.UID
	made, err := r.waitForPod(ctx, rec, sb)
	if err != nil {
		return nil, err
	}
	return r.waitRunning(ctx, made)
}

func (r *Runtime) createSandbox(ctx context.Context, rec record, pod *corev1.Pod) (*sandboxObject, error) {
	no := false
	sb := &sandboxObject{
		TypeMeta: metav1.TypeMeta{APIVersion: sandboxAPIVersion, Kind: sandboxKind},
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: r.opt.Namespace,
			Labels:          map[string]string{labelManaged: managedBy},
			Annotations:     map[string]string{annName: rec.spec.Name},
			OwnerReferences: []metav1.OwnerReference{recordOwner(rec.cm)}},
		Spec: sandboxSpec{
			PodTemplate:   sandboxPodTemplate{Spec: pod.Spec, Metadata: sandboxPodMetadata{Labels: pod.Labels, Annotations: pod.Annotations}},
			OperatingMode: modeRunning,
			Service:       &no,
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sb)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: the Sandbox of %s: %w", rec.spec.Name, err)
	}
	made, err := r.sandboxes().Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, r.noSandboxResource(err)
	case apierrors.IsAlreadyExists(err):
		return nil, fmt.Errorf("container %s: a Sandbox named %s is there already: %w", rec.spec.Name, pod.Name, sandbox.ErrInUse)
	case err != nil:
		return nil, fmt.Errorf("kubernetes: create the Sandbox of %s: %w", rec.spec.Name, err)
	}
	return fromUnstructured(made)
}

// setMode sets sb's operatingMode, if sb is still the object of its UID.
func (r *Runtime) setMode(ctx context.Context, sb *sandboxObject, mode string) error {
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": sb.UID},
		"spec":     map[string]any{"operatingMode": mode},
	})
	_, err := r.sandboxes().Patch(ctx, sb.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("kubernetes: set the Sandbox %s %s: %w", sb.Name, mode, err)
	}
	return nil
}

// waitForPod waits, within the start timeout, for the pod the controller
// makes for sb: named after it, and controlled by it.
func (r *Runtime) waitForPod(ctx context.Context, rec record, sb *sandboxObject) (*corev1.Pod, error) {
	deadline := time.Now().Add(r.opt.StartTimeout)
	pods := r.cs.CoreV1().Pods(r.opt.Namespace)
	for {
		p, err := pods.Get(ctx, sb.Name, metav1.GetOptions{})
		switch {
		case err == nil && madeBy(p, rec) && p.DeletionTimestamp == nil:
			return p, nil
		case err != nil && !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("kubernetes: read the pod of %s: %w", rec.spec.Name, err)
		}
		if time.Now().After(deadline) {
			why := "is agent-sandbox's controller running?"
			if cur, err := r.getSandbox(ctx, sb.Name); err == nil && cur != nil {
				var said []string
				for _, c := range cur.Status.Conditions {
					if c.Message != "" {
						said = append(said, c.Type+": "+c.Message)
					}
				}
				if len(said) > 0 {
					why = "its Sandbox says " + strings.Join(said, "; ")
				}
			}
			return nil, fmt.Errorf("kubernetes: no pod was made for %s's Sandbox in %s: %s", rec.spec.Name, r.opt.StartTimeout, why)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kubernetes: the wait for the pod of %s: %w", rec.spec.Name, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// suspendSandbox sets rec's Sandbox suspended, so that its controller
// does not make the pod again once the runtime deleted it.
func (r *Runtime) suspendSandbox(ctx context.Context, rec record) error {
	sb, err := r.getSandbox(ctx, rec.cm.Name)
	if err != nil || sb == nil || !ownedBy(sb, rec.cm.UID) || sb.Spec.OperatingMode == modeSuspended {
		return err
	}
	return r.setMode(ctx, sb, modeSuspended)
}

// deleteSandbox deletes rec's Sandbox, if it owns one.
func (r *Runtime) deleteSandbox(ctx context.Context, rec record) error {
	sb, err := r.getSandbox(ctx, rec.cm.Name)
	if err != nil || sb == nil || !ownedBy(sb, rec.cm.UID) {
		return err
	}
	uid := sb.UID
	err = r.sandboxes().Delete(ctx, sb.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("kubernetes: delete the Sandbox of %s: %w", rec.spec.Name, err)
	}
	return nil
}
