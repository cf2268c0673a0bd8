package etcdlock

// SetBeforeWatch sets a function run before each watch of the key ahead,
// with the revision the watch starts after; nil removes it.
func SetBeforeWatch(f func(read int64)) { beforeWatch = f }
