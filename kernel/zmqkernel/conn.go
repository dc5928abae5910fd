package zmqkernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Conn is a Jupyter connection file: where the kernel binds its five
// sockets and the key that signs every message.
type Conn struct {
	Transport       string `json:"transport"`
	IP              string `json:"ip"`
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	StdinPort       int    `json:"stdin_port"`
	ControlPort     int    `json:"control_port"`
	HBPort          int    `json:"hb_port"`
	SignatureScheme string `json:"signature_scheme"`
	Key             string `json:"key"`
	KernelName      string `json:"kernel_name"`
}

// ReadConn reads and checks the connection file at path.
func ReadConn(path string) (*Conn, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("connection file %s does not exist", path)
		}
		return nil, fmt.Errorf("connection file: %w", err)
	}
	var c Conn
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("connection file %s is not valid JSON: %v", path, err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("connection file %s: %w", path, err)
	}
	return &c, nil
}

func (c *Conn) check() error {
	if c.Transport == "" {
		c.Transport = "tcp"
	}
	if c.Transport != "tcp" {
		return fmt.Errorf("transport %q is not supported (only tcp)", c.Transport)
	}
	if c.IP == "" {
		return errors.New("ip is missing")
	}
	for _, p := range []struct {
		name string
		port int
	}{{"shell_port", c.ShellPort}, {"iopub_port", c.IOPubPort}, {"stdin_port", c.StdinPort}, {"control_port", c.ControlPort}, {"hb_port", c.HBPort}} {
		if p.port <= 0 || p.port > 65535 {
			return fmt.Errorf("%s is missing or not a port (%d)", p.name, p.port)
		}
	}
	if c.SignatureScheme == "" {
		c.SignatureScheme = "hmac-sha256"
	}
	if c.SignatureScheme != "hmac-sha256" {
		return fmt.Errorf("signature_scheme %q is not supported (only hmac-sha256)", c.SignatureScheme)
	}
	return nil
}

func (c *Conn) addr(port int) string {
	return fmt.Sprintf("%s://%s:%d", c.Transport, c.IP, port)
}
