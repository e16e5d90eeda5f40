package sandbox

import "context"

// RefillSparesNow runs one refill of the spares and returns once it is
// done, for tests that look at what it kept.
func (m *Manager) RefillSparesNow(ctx context.Context) { m.refillSpares(ctx) }

// LookAtLocalSparesNow runs one of the looks the Manager takes at its
// own spares every minute, and returns once it is done.
func (m *Manager) LookAtLocalSparesNow(ctx context.Context) { m.lookAtLocal(ctx) }

// ReadySpares is how many spares m booted and holds ready for a claim
// (their shell open, for an allowlist spare its agent and CA).
func (m *Manager) ReadySpares() int { return len(m.localSpares()) }

// Quiet reports whether closing the shells of sandbox name (booted by m)
// would end all m runs there with no sweep: none runs a command, the
// server's own scripts included.
func (m *Manager) Quiet(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.slots {
		if sb := s.sb; sb != nil && sb.Name == name {
			return m.quiet(sb)
		}
	}
	return false
}
