package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RemoveVolume removes volume vol through rt, retrying while the engine
// says a container still holds it (ErrInUse: one being removed, by the
// caller or by a reset's background removal), for up to wait; then it
// reports the volume as still in use. Any other failure is reported at
// once, and a missing volume is no error.
//
// Callers remove the containers first and the volume after, never both
// at once: the engine's force-removal of a volume removes its containers
// too, with its locks taken in the order that can deadlock podman 4.3
// (see docker.VolumeRemoveArgs).
func RemoveVolume(ctx context.Context, rt Runtime, vol string, wait time.Duration) error {
	end := time.Now().Add(wait)
	pause := 50 * time.Millisecond
	for {
		err := rt.VolumeRemove(ctx, vol)
		if err == nil || !errors.Is(err, ErrInUse) {
			return err
		}
		if time.Now().Add(pause).After(end) {
			return fmt.Errorf("volume %s: a container still held it after %v: %w", vol, wait, err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}
