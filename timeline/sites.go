package timeline

import (
	"sync"

	"linger/timeline/event"
)

// Sites holds a trace's site definitions as its file encodes them, and
// decodes each site the first time it is asked for (Site), keeping it.
// A pass over a trace that names few of its sites, as a page's findings
// name a handful of an imported PyTorch snapshot's 86,000 tracebacks of
// 40 frames, decodes those alone. A Reader fills it (Reader.LazySites);
// it is safe for concurrent use.
type Sites struct {
	mu      sync.Mutex
	enc     map[event.SiteID]encodedSite
	decoded map[event.SiteID]event.Site
	frames  event.FrameTable
	// The encodings, back to back in blocks (one of its own for a large
	// one), so that the collector has few objects to see: each block
	// twice the last, from 4 KiB (a trace of a few sites keeps a few
	// KiB) to sitesBlock.
	block []byte
}

// encodedSite is a site's definition and its stack's (nil if none), as
// event.AppendSiteDef and event.AppendStackDef wrote them.
type encodedSite struct{ site, stack []byte }

const sitesBlock = 1 << 20

// Site returns the site with the given id and whether it is defined.
func (s *Sites) Site(id event.SiteID) (event.Site, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.decoded[id]; ok {
		return v, true
	}
	enc, ok := s.enc[id]
	if !ok {
		return event.Site{}, false
	}
	// Both encodings were checked when defined (define): they decode.
	_, v, _, err := s.frames.DecodeSiteDef(enc.site)
	if err != nil {
		return event.Site{}, false
	}
	if enc.stack != nil {
		if _, v.Stack, _, err = s.frames.DecodeStackDef(enc.stack); err != nil {
			return event.Site{}, false
		}
	}
	if s.decoded == nil {
		s.decoded = make(map[event.SiteID]event.Site)
	}
	s.decoded[id] = v
	return v, true
}

// defineSite records the site definition at the start of p, as
// event.DecodeSiteDef would read it, replacing any earlier one (and its
// stack), and returns its length, or DecodeSiteDef's error for one that
// does not decode.
func (s *Sites) defineSite(p []byte) (int, error) {
	id, n, err := event.SiteDefLen(p)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.enc == nil {
		s.enc = make(map[event.SiteID]encodedSite)
	}
	s.enc[id] = encodedSite{site: s.keep(p[:n])}
	delete(s.decoded, id)
	return n, nil
}

// defineStack records the stack definition at the start of p for its
// site, if that is defined (as a Dict does), and returns its length, or
// event.DecodeStackDef's error for one that does not decode.
func (s *Sites) defineStack(p []byte) (int, error) {
	id, n, err := event.StackDefLen(p)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if enc, ok := s.enc[id]; ok {
		enc.stack = s.keep(p[:n])
		s.enc[id] = enc
		delete(s.decoded, id)
	}
	return n, nil
}

// keep copies b into the current block. The caller holds s.mu.
func (s *Sites) keep(b []byte) []byte {
	if len(b) > sitesBlock/4 {
		return append([]byte(nil), b...)
	}
	if len(s.block)+len(b) > cap(s.block) {
		s.block = make([]byte, 0, min(max(2*cap(s.block), 4<<10, len(b)), sitesBlock))
	}
	s.block = append(s.block, b...)
	return s.block[len(s.block)-len(b) : len(s.block) : len(s.block)]
}
