// Package sandbox is the domain of sandbox-mcp: the Manager, the one API
// front ends (the MCP layer, the human CLI) call, and the Runtime contract
// that engine dialects implement.
//
// # Ownership
//
// A Manager holds one slot per sandbox name: its lifecycle lock and, once
// booted, a Sandbox. The Sandbox owns everything that lives with it in this
// process (its pool of shells, the disk watcher, and the port forwards, sync
// jobs and terminals still to come), started with Sandbox.Go or kept as
// fields ended in Sandbox.end. Destroy, reset, a lost container and
// Manager.Close end a Sandbox; ending it cuts its commands short (they say
// why) and joins its work. Work that is not a sandbox's (history flushing,
// activity marks, deleting replaced containers, reconciling) is started
// with Manager.spawn and joined by Close.
//
// Across server processes, lifecycle changes take a lock file per name
// (package locks), and a background duty that one process should do for
// all (reconciling the state today; port listeners and sync jobs later)
// is held through a lease: a held lock file plus the holder's pid, taken
// over when the holder dies.
//
// # Engine capabilities
//
// Runtime is what every engine can do. What only some engines can do is a
// small interface of its own, implemented by the dialects that can and
// discovered with a type assertion where it is used:
//
//	if r, ok := m.rt.(Renamer); ok { … } else { … fallback … }
//
// Today: Renamer (reset moves the old container aside), StatsReader
// (engine-side stats), SizedVolumeCreator, DiskLimiter and UsageDirs (disk
// limits). The capabilities to come follow the same pattern and are added
// with the features that need them: copying tar streams in and out
// (transfer), commit and export (snapshots), building images, and exec with
// a TTY (terminals). A dialect asserts what it implements at compile time
// (var _ sandbox.Renamer = (*Dialect)(nil)).
//
// # In-VM text
//
// No file here writes shell text for a sandbox to run: package guest does,
// with golden tests.
package sandbox
