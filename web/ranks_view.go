package web

import "fmt"

// RanksView is the ranks page: several ranks' saved traces of one
// distributed job, a row each, the ranks not like the others pointed at
// with the reason, and any two of them picked for the compare view.
type RanksView struct {
	Page
	// Traces are the saved traces' names, for the picker, in the order
	// given; Chosen the names asked for.
	Traces, Chosen []string
	// Message says why the ranks cannot be shown (a trace not found, one
	// trace only); the page then shows it and the picker.
	Message string
	// Ranks are the rows, in the order given (the server sorts them by
	// rank).
	Ranks []RankView
	// Steps are the ranks step by step, empty when no rank has steps.
	Steps StepsView
	// A and B are the two ranks the compare form has picked at first: a
	// typical rank and the first odd one (else the first two).
	A, B string
	// Rule is the odd-rank rule in words, under the table.
	Rule string
	// APIURL is the same as JSON.
	APIURL string
}

// Ready reports whether the view has ranks to show.
func (v RanksView) Ready() bool { return len(v.Ranks) > 0 && v.Message == "" }

// Odd returns the ranks pointed at.
func (v RanksView) Odd() []RankView {
	var odd []RankView
	for _, r := range v.Ranks {
		if len(r.Reasons) > 0 {
			odd = append(odd, r)
		}
	}
	return odd
}

// RankView is one rank's row.
type RankView struct {
	// Name is its trace; Label what the row calls it ("rank 3").
	Name, Label string
	// Bytes: at the peak, lingering (leaked, and freed late, of those),
	// allocated at the end.
	Peak, Lingering, Leaked, LateFree, End int64
	// Growth is the fastest growing series in words ("+6.0 MiB/step
	// (kv_cache)"), "" when nothing grows; GrowthSite its site, when it
	// is a site's.
	Growth, GrowthSite string
	OOMs, Events       uint64
	// Truncated says why its trace ends early, "" when it does not.
	Truncated string
	// Reasons say how it differs from the other ranks; empty when it does
	// not.
	Reasons []string
	// CompareWith is the typical rank an odd one is compared with ("" when
	// it is not odd).
	CompareWith, CompareWithLabel string
}

func (r RankView) odd() bool { return len(r.Reasons) > 0 }

// lingeringTitle splits the lingering bytes into what was never freed and
// what was freed late.
func (r RankView) lingeringTitle() string {
	return fmt.Sprintf("%s never freed, %s freed late", formatSize(r.Leaked), formatSize(r.LateFree))
}
