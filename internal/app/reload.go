package app

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// reloadSettle is how long the config file must stay unchanged before it
// is read again (an editor writes it in several steps).
const reloadSettle = 300 * time.Millisecond

// watchConfig reloads the sandboxes' profiles (network policies included)
// when the config file changes or the process gets SIGHUP, until ctx
// ends. A file that no longer reads as a valid configuration is logged and
// changes nothing. Network policies apply from each sandbox's next
// connection; other profile keys from its next boot; other settings need
// a restart.
func (e *Env) watchConfig(ctx context.Context, cfg Config) {
	if cfg.Reload == nil {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var events <-chan fsnotify.Event
	if cfg.File != "" {
		if w, err := fsnotify.NewWatcher(); err != nil {
			e.Logger.Warn("the config file is not watched: SIGHUP reloads it", "err", err)
		} else {
			defer w.Close()
			// The directory: an editor's rename replaces the file itself.
			if err := w.Add(filepath.Dir(cfg.File)); err != nil {
				e.Logger.Warn("the config file is not watched: SIGHUP reloads it", "file", cfg.File, "err", err)
			} else {
				events = w.Events
			}
		}
	}
	abs, _ := filepath.Abs(cfg.File)
	current := cfg
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			current = e.reload(current)
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if p, _ := filepath.Abs(ev.Name); p == abs {
				settle = time.After(reloadSettle)
			}
		case <-settle:
			settle = nil
			current = e.reload(current)
		}
	}
}

// reload reads the configuration again and applies its profiles; it
// returns the configuration now in force.
func (e *Env) reload(old Config) Config {
	cfg, err := old.Reload()
	if err != nil {
		e.Logger.Error("configuration not reloaded: the sandboxes keep their profiles and network policies", "err", err)
		return old
	}
	cfg.Reload = old.Reload
	if reflect.DeepEqual(cfg.Defaults, old.Defaults) && reflect.DeepEqual(cfg.Profiles, old.Profiles) && cfg.Spares == old.Spares {
		e.Logger.Info("configuration read again: no profile changed")
		return cfg
	}
	e.Manager.SetProfiles(cfg.Defaults, cfg.Profiles)
	e.Manager.KeepSpares(cfg.Spares) // a spare booted as the old defaults is replaced
	e.Logger.Info("configuration reloaded: network policies apply from each sandbox's next connection, other profile keys from its next boot",
		"network", cfg.Defaults.Network, "presets", fmt.Sprint(cfg.Defaults.Presets), "allow", fmt.Sprint(cfg.Defaults.Allow))
	return cfg
}
