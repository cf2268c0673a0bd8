package torture

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/pgfence"
	"github.com/dlock-go/dlock/fence/redisfence"
)

// register is the protected resource: one value per lock key, read and
// written under the lock's fence through a guard.
type register interface {
	// read registers fence for tok and returns the value (see
	// redisfence.Guard.Read): from then on a stale holder's write is
	// refused.
	read(ctx context.Context, key string, fence uint64, tok string) (val, out string)
	write(ctx context.Context, key string, fence uint64, tok, val string) (out string)
}

func newRegister(cfg workerConfig, oracle *redis.Client) (register, error) {
	broken := !cfg.ControlOff
	switch {
	case cfg.Control == ControlNoFence && broken:
		return plainRegister{oracle}, nil
	case cfg.Control == ControlGTE && broken:
		return gteRegister{oracle}, nil
	case cfg.Guard != "":
		pool, err := pgxpool.New(context.Background(), cfg.Guard)
		if err != nil {
			return nil, err
		}
		t, err := pgfence.NewTable(registerTbl, "id")
		if err != nil {
			pool.Close()
			return nil, err
		}
		return &pgRegister{pool, t}, nil
	}
	g, err := redisfence.New(oracle)
	if err != nil {
		return nil, err
	}
	return redisRegister{g}, nil
}

// outcome classifies a guard's answer.
func outcome(err error) string {
	var se *fence.StaleError
	switch {
	case err == nil:
		return outOK
	case errors.As(err, &se) && se.Tie:
		return outTie
	case errors.As(err, &se):
		return outStale
	}
	return outUnknown
}

// redisRegister is dlock's Redis guard, on the oracle's server.
type redisRegister struct{ g *redisfence.Guard }

func (r redisRegister) read(ctx context.Context, key string, f uint64, tok string) (string, string) {
	v, _, err := r.g.Read(ctx, registerPfx+key, f, tok)
	return v, outcome(err)
}

func (r redisRegister) write(ctx context.Context, key string, f uint64, tok, val string) string {
	return outcome(r.g.Write(ctx, registerPfx+key, f, tok, val))
}

// pgRegister is dlock's PostgreSQL guard: a row per key in a table of a
// database no fault touches. A read registers the fence and reads the row
// in one transaction; a write is one conditional UPDATE. (Holding one
// transaction across the whole section would keep the row locked while a
// paused holder sleeps, and stall everyone behind it.)
type pgRegister struct {
	pool  *pgxpool.Pool
	table *pgfence.Table
}

func (r *pgRegister) read(ctx context.Context, key string, f uint64, tok string) (string, string) {
	var val string
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if err := r.table.Register(ctx, tx, key, f, tok); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT value FROM `+registerTbl+` WHERE id = $1`, key).Scan(&val)
	})
	return val, outcome(err)
}

func (r *pgRegister) write(ctx context.Context, key string, f uint64, tok, val string) string {
	return outcome(r.table.Update(ctx, r.pool, key, f, tok, map[string]any{"value": val}))
}

// pgRegisterSQL creates the PostgreSQL register's table with a row per key.
const pgRegisterSQL = `CREATE TABLE ` + registerTbl + ` (
	id text PRIMARY KEY,
	value text NOT NULL DEFAULT '',
	fence numeric(20,0),
	fence_holder text
)`

// plainRegister is the no-fence control: the value is read and written
// with no guard at all, and every write "succeeds".
type plainRegister struct{ c *redis.Client }

func (r plainRegister) read(ctx context.Context, key string, _ uint64, _ string) (string, string) {
	v, err := r.c.HGet(ctx, registerPfx+key, "value").Result()
	if err != nil && err != redis.Nil {
		return "", outUnknown
	}
	return v, outOK
}

func (r plainRegister) write(ctx context.Context, key string, _ uint64, _, val string) string {
	if err := r.c.HSet(ctx, registerPfx+key, "value", val).Err(); err != nil {
		return outUnknown
	}
	return outOK
}

// gteRegister is the control whose guard accepts a fence >= the highest
// seen from anyone: the tie rule left out.
type gteRegister struct{ c *redis.Client }

// gteScript: KEYS[1] the register; ARGV op, fence (decimal, no leading
// zeros: compared by length, then as strings), token, value.
var gteScript = redis.NewScript(`
local h = redis.call('HGET', KEYS[1], 'fence')
local f = ARGV[2]
if h and (#f < #h or (#f == #h and f < h)) then return {0} end
redis.call('HSET', KEYS[1], 'fence', f, 'holder', ARGV[3])
if ARGV[1] == 'write' then
  redis.call('HSET', KEYS[1], 'value', ARGV[4])
  return {1}
end
return {1, redis.call('HGET', KEYS[1], 'value') or ''}
`)

func (r gteRegister) run(ctx context.Context, op, key string, f uint64, tok, val string) (string, string) {
	reply, err := gteScript.Run(ctx, r.c, []string{registerPfx + key}, op, f, tok, val).Slice()
	if err != nil || len(reply) == 0 {
		return "", outUnknown
	}
	if ok, _ := reply[0].(int64); ok != 1 {
		return "", outStale
	}
	if len(reply) > 1 {
		v, _ := reply[1].(string)
		return v, outOK
	}
	return "", outOK
}

func (r gteRegister) read(ctx context.Context, key string, f uint64, tok string) (string, string) {
	return r.run(ctx, "read", key, f, tok, "")
}

func (r gteRegister) write(ctx context.Context, key string, f uint64, tok, val string) string {
	_, out := r.run(ctx, "write", key, f, tok, val)
	return out
}
