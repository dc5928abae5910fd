// Package plot keeps a bounded history of a trace's memory (Series) and
// draws a stretch of it as a picture (Picture): live bytes stacked by
// category, the allocated, reserved and device-used tracks, the cells
// banded, idle time collapsed, and lingering objects marked where they
// were allocated; as SVG and as PNG, for notebook frontends without
// Linger's timeline (the kernel's timeline.plot()).
//
// A Series is fed every event, on the kernel's event path: an alloc or
// free costs it a few additions and comparisons, a copy of the
// categories when allocated reaches a new high within a point. It keeps
// points of the session and of the last two cells, each list bounded
// (pairs merge, the width doubling, when one fills), the cells' spans
// and the longest idle stretches: about 1 MiB at most however long the
// session. A column of a picture stacks the categories as they were at
// its allocated peak, so that its stack's top is that peak, and draws
// the tracks' maxima in it.
//
// The SVG has its own opaque background and the timeline page's colours,
// so it reads alike in light and dark notebook themes; its size is
// bounded by the picture's width (one step per column at most, straight
// runs merged). The PNG is the same shapes rasterized with
// golang.org/x/image/vector, text in basicfont's 7 × 13 face.
package plot
