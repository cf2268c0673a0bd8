package pgfence_test

import (
	"fmt"
	"testing"

	"github.com/dlock-go/dlock/internal/testkit/testsrv"
)

// Replicas that start together all run Guard.Migrate on a fresh database:
// every one of them succeeds, whether it runs on a connection or inside a
// transaction, and the guard then works.
func TestMigrateConcurrently(t *testing.T) {
	const rounds, workers = 3, 8
	ctx := testCtx(t)
	for round := range rounds {
		p := shared.SchemaPool(t, fmt.Sprintf("guard_migrate_race_%d", round), workers)
		for _, err := range testsrv.Together(ctx, t, p, workers, func(db testsrv.DB) error { return guard.Migrate(ctx, db) }) {
			t.Errorf("round %d: concurrent Migrate: %v", round, err)
		}
		if err := guard.Register(ctx, p, "r", 1, "tok"); err != nil {
			t.Errorf("round %d: Register after Migrate: %v", round, err)
		}
	}
}
