package dlockotel

// SetMaxTracked lowers the bound on the per-lock state.
func SetMaxTracked(o *Observer, n int) { o.maxLen = n }

// Tracked returns how many locks o keeps state for.
func Tracked(o *Observer) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.locks)
}

// ScopeVersion is the instrumentation scope's version in this build.
var ScopeVersion = scopeVersion

// ModuleVersion is the version of a module in a build's information.
var ModuleVersion = moduleVersion
