package demo

import "context"

var fencingScenario = scenario{
	title: "Fencing (pending)", short: "fencing", summary: "pending", proves: []string{"pending"},
	run: func(ctx context.Context, e *env, s *section) error { s.say("pending"); return nil },
}

var redlockScenario = scenario{
	title: "Redlock (pending)", short: "Redlock", summary: "pending", proves: []string{"pending"},
	run: func(ctx context.Context, e *env, s *section) error { s.say("pending"); return nil },
}
