package torture

func writeTimeline(path string, r *Report) error { return nil }
