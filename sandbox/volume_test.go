package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// volumeRT is a Runtime whose VolumeRemove answers from a list of errors,
// one per call; only VolumeRemove may be called.
type volumeRT struct {
	Runtime
	errs  []error
	calls int
}

func (r *volumeRT) VolumeRemove(context.Context, string) error {
	r.calls++
	if len(r.errs) == 0 {
		return nil
	}
	err := r.errs[0]
	r.errs = r.errs[1:]
	return err
}

func inUse() error {
	return &EngineError{Argv: []string{"podman", "volume", "rm"}, Kind: ErrInUse, Stderr: "volume is being used"}
}

func TestRemoveVolumeWaitsWhileInUse(t *testing.T) {
	rt := &volumeRT{errs: []error{inUse(), inUse(), nil}}
	if err := RemoveVolume(context.Background(), rt, "v", time.Minute); err != nil || rt.calls != 3 {
		t.Fatalf("RemoveVolume = %v after %d calls, want nil after 3", err, rt.calls)
	}
}

// Another failure is not retried: an engine that timed out would only
// be waited on again.
func TestRemoveVolumeReportsOtherFailuresAtOnce(t *testing.T) {
	boom := fmt.Errorf("the engine did not answer in time: %w", context.DeadlineExceeded)
	rt := &volumeRT{errs: []error{boom, nil}}
	if err := RemoveVolume(context.Background(), rt, "v", time.Minute); !errors.Is(err, context.DeadlineExceeded) || rt.calls != 1 {
		t.Fatalf("RemoveVolume = %v after %d calls, want the engine's error after 1", err, rt.calls)
	}
}

func TestRemoveVolumeGivesUpAndSaysWhy(t *testing.T) {
	errs := make([]error, 100)
	for i := range errs {
		errs[i] = inUse()
	}
	rt := &volumeRT{errs: errs}
	err := RemoveVolume(context.Background(), rt, "v", 300*time.Millisecond)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "still held it") {
		t.Fatalf("RemoveVolume = %v, want an in-use error that says it waited", err)
	}
	if rt.calls < 2 {
		t.Fatalf("tried %d times, want retries", rt.calls)
	}
}
