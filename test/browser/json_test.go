package browser

import "encoding/json"

// jsonString decodes a mime bundle value: a string, or a list of lines.
func jsonString(raw json.RawMessage, out *string) error {
	if err := json.Unmarshal(raw, out); err == nil {
		return nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return errNotString
	}
	for _, l := range lines {
		*out += l
	}
	return nil
}
