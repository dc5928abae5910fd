// Package wire is the pipe protocol between the notebook server and a
// kernel process: the frames each side writes, the kernel's Hello, the
// Control operations, and the event batches the kernel's Emitter fills.
// Both sides import it; it knows neither the engine nor Starlark.
//
// The server writes frames to the kernel's stdin and reads frames from its
// stdout; stderr is left alone for panics and logs. A frame is
//
//	length  uint32 big-endian: the bytes that follow (type + payload), 1..MaxFrame
//	type    byte:  FrameHello, FrameMessage, FrameEvents or FrameControl
//	payload length-1 bytes
//
// FrameHello (kernel → server, first frame): JSON Hello.
// FrameMessage (both ways): the JSON of a msg.Message, buffers included.
// FrameControl (both ways): JSON Control (interrupt, shutdown, lingering
// query and answer).
// FrameEvents (kernel → server): a sequence of records, each a tag byte
// then its body:
//
//	tagString  event.AppendStringDef encoding
//	tagSite    event.AppendSiteDef encoding
//	tagSiteStack (4) a site with a notebook call stack: the tagSite
//	           encoding, then its Stack as event.AppendFrames writes it
//	tagEvents  uvarint first seq, uvarint count, uvarint n, then n bytes of
//	           events encoded by a fresh event.Encoder
//
// A record defines every string and site before the first event using it,
// as the kernel's Emitter made them; an EventBuffer builds such payloads
// and DecodeEvents replays one into an event.Sink.
//
// # Costs
//
// ReadFrame allocates the payload, at most MaxFrame bytes, and refuses a
// larger length before reading or allocating anything. DecodeEvents
// allocates nothing of its own: it decodes into the sink's calls. An
// EventBuffer owns its payload until Take hands it over.
package wire
