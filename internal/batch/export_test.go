package batch

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// NewFunc returns a Batcher that sends each batch with send, which must
// leave each command's reply or error in it.
func NewFunc(send func(ctx context.Context, cmds []redis.Cmder)) *Batcher {
	return &Batcher{one: func(ctx context.Context, cmd redis.Cmder) { send(ctx, []redis.Cmder{cmd}) }, many: send}
}
