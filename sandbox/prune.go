package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Pruned is what Prune removed (or, in a dry run, would remove).
type Pruned struct {
	// Containers are containers of this prefix that no sandbox uses: the
	// old container of a reset whose server exited before removing it.
	Containers []string `json:"containers"`
	// Volumes are workspace volumes of this prefix whose sandbox's
	// container is gone (removed behind the server's back).
	Volumes []string `json:"volumes"`
	// VolumesUnknown says why volumes were not looked at, if they were not.
	VolumesUnknown string `json:"volumes_unknown,omitempty"`
	// Images are the untagged images that clones of this prefix left and
	// no container uses any more.
	Images []string `json:"images"`
	// Network is the sandboxes' shared network, removed when no
	// container of this prefix is left.
	Network string `json:"network,omitempty"`
	// Networks are the family networks removed (see LabelFamily).
	Networks []string `json:"family_networks,omitempty"`
}

// Prune removes what sandboxes of this prefix left in the engine:
// containers no sandbox uses, untagged clone images no container uses,
// and workspace volumes without a sandbox.
// Running sandboxes and their workspaces are never touched; each volume is
// checked and removed under its sandbox's lifecycle lock, so a boot cannot
// lose a volume it has just created. With dryRun nothing is removed.
func (m *Manager) Prune(ctx context.Context, dryRun bool) (Pruned, error) {
	var p Pruned
	cs, err := m.listOwn(ctx)
	if err != nil {
		return p, err
	}
	for _, c := range cs {
		// A spare stopped by its idle TTL (a server that still keeps
		// spares removes it itself at its next look).
		if m.isSpareName(c.Name) && !c.Running() {
			if !dryRun {
				m.dropSpareWaiting(ctx, c) // spare.go: its workspace goes with it
			}
			p.Containers = append(p.Containers, c.Name)
		}
	}
	pending := m.intentTrash()
	for _, name := range m.orphans(cs) {
		if pending[name] {
			continue // a reset's or restore's old container, which its undo may yet put back
		}
		if !dryRun {
			if err := m.rt.Remove(ctx, name); err != nil {
				return p, fmt.Errorf("remove container %s: %w", name, err)
			}
		}
		p.Containers = append(p.Containers, name)
	}
	if ip, ok := m.rt.(ImagePruner); ok {
		p.Images, err = ip.PruneImages(ctx, map[string]string{LabelOwner: m.cfg.Prefix, LabelClone: ""}, dryRun)
		if err != nil {
			return p, fmt.Errorf("clone images: %w", err)
		}
	}
	if nw, ok := m.rt.(Networker); ok && len(cs) == len(p.Containers) && (dryRun || m.noneLeft(ctx)) {
		gone, err := nw.RemoveNetwork(ctx, m.NetworkName(), dryRun)
		if err != nil {
			return p, err
		}
		if gone {
			p.Network = m.NetworkName()
		}
		// The networks of families whose sandboxes are all gone.
		fams, err := nw.Networks(ctx, LabelOwner, m.cfg.Prefix)
		if err != nil {
			return p, fmt.Errorf("list networks: %w", err)
		}
		for _, n := range fams {
			if n == m.NetworkName() || !m.ours(n) {
				continue
			}
			if gone, err := nw.RemoveNetwork(ctx, n, dryRun); err != nil {
				return p, err
			} else if gone {
				p.Networks = append(p.Networks, n)
			}
		}
	}
	vl, ok := m.rt.(VolumeLister)
	if !ok {
		p.VolumesUnknown = m.rt.Kind() + " does not list volumes"
		return p, nil
	}
	names, err := vl.VolumeNames(ctx)
	if err != nil {
		return p, err
	}
	wsPrefix := m.cfg.Prefix + "-ws-"
	for _, vol := range names {
		name, ok := strings.CutPrefix(vol, wsPrefix)
		if !ok || ValidateName(name) != nil || m.volumeFor(name) != vol {
			continue
		}
		gone, err := m.pruneVolume(ctx, name, vol, dryRun)
		if err != nil {
			return p, err
		}
		if gone {
			p.Volumes = append(p.Volumes, vol)
		}
	}
	gone, err := m.pruneSpareVolumes(ctx, cs, names, dryRun)
	p.Volumes = append(p.Volumes, gone...)
	return p, err
}

// pruneSpareVolumes removes the spare workspaces among names that no
// container of cs mounts: a spare's whose boot or removal was cut short,
// or a sandbox's that began as a spare and whose container is gone (its
// record goes too, as a sandbox's own workspace goes in that case). It
// holds the refill's lock, so a spare being booted keeps its new volume.
func (m *Manager) pruneSpareVolumes(ctx context.Context, cs []Container, names []string, dryRun bool) ([]string, error) {
	vols := m.unmountedSpareVolumes(cs, names) // spare.go
	if len(vols) == 0 {
		return nil, nil
	}
	h, err := m.locks.Lock(ctx, m.cfg.Prefix+"_spares", "prune")
	if err != nil {
		return nil, err
	}
	defer h.Release()
	owners := map[string]string{}
	if m.cfg.Sandboxes != nil {
		recs, err := m.cfg.Sandboxes.Sandboxes()
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if m.validSpareVolume(r.Volume) {
				owners[r.Volume] = r.Name
			}
		}
	}
	var out []string
	for _, vol := range vols {
		if name, ok := owners[vol]; ok {
			gone, err := m.pruneVolume(ctx, name, vol, dryRun)
			if err != nil {
				return out, err
			}
			if gone {
				out = append(out, vol)
				if !dryRun {
					if err := m.cfg.Sandboxes.DeleteSandbox(name); err != nil {
						return out, err
					}
					m.dropSpareChannel(vol) // the channel it had as a spare
				}
			}
			continue
		}
		if !dryRun {
			if err := m.rt.VolumeRemove(ctx, vol); err != nil && !errors.Is(err, ErrNotFound) {
				if errors.Is(err, ErrInUse) {
					continue // a container made since the listing holds it
				}
				return out, fmt.Errorf("remove volume %s: %w", vol, err)
			}
			m.dropSpareChannel(vol)
		}
		out = append(out, vol)
	}
	return out, nil
}

// pruneVolume removes the workspace vol of sandbox name when the sandbox's
// container does not exist, holding the name's lifecycle lock.
func (m *Manager) pruneVolume(ctx context.Context, name, vol string, dryRun bool) (bool, error) {
	release, err := m.lockName(ctx, name, "prune")
	if err != nil {
		return false, err
	}
	defer release()
	if _, err := m.rt.Inspect(ctx, m.ContainerFor(name)); err == nil {
		return false, nil
	} else if !errors.Is(err, ErrNotFound) {
		return false, err
	}
	if !dryRun {
		err := m.rt.VolumeRemove(ctx, vol)
		if errors.Is(err, ErrInUse) {
			// A container under another name holds it (one a reset
			// left, being removed): not an orphan, or not yet.
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("remove volume %s: %w", vol, err)
		}
	}
	return true, nil
}

// noneLeft reports whether the engine lists no container of this server's
// prefix now. A spare another goroutine was removing while prune looked
// (the spares' own look, which holds it) may still be there: its network
// then stays for the next prune rather than failing this one.
func (m *Manager) noneLeft(ctx context.Context) bool {
	cs, err := m.listOwn(ctx)
	return err == nil && len(cs) == 0
}
