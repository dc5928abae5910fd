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
// FrameEvents (kernel → server): an event.Batch payload, a sequence of
// records (string and site definitions, runs of encoded events; see
// event.Batch for their bytes), each definition before the first event
// using it, as the kernel's Emitter made them. An EventBuffer (an
// event.Batch) builds such payloads and DecodeEvents replays one into an
// event.Sink. A probe inside a service posts the same payloads to the
// server over HTTP (package probe).
//
// # Costs
//
// ReadFrame allocates the payload, at most MaxFrame bytes, and refuses a
// larger length before reading or allocating anything. DecodeEvents
// allocates nothing of its own: it decodes into the sink's calls. An
// EventBuffer owns its payload until Take hands it over.
package wire
