package sandbox

import "context"

// RefillSparesNow runs one refill of the spares and returns once it is
// done, for tests that look at what it kept.
func (m *Manager) RefillSparesNow(ctx context.Context) { m.refillSpares(ctx) }
