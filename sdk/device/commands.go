package device

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Limits of what a device sends about a command (docs/device-protocol.md,
// "Commands"). The SDK checks them before sending.
const (
	MaxResult          = 256 << 10 // bytes of an answer's result, as JSON
	MaxProgressDetails = 4 << 10   // bytes of a progress report's details, as JSON
)

// Codes the SDK answers with by itself. Any other code is the handler's:
// 0 is success, anything else a failure whose meaning the device and its
// backend agree on.
const (
	// CodeHandlerFailed answers a command whose handler panicked or
	// returned a result that could not be encoded or was over MaxResult.
	CodeHandlerFailed = 500
	// CodeUnknownCommand answers a command no handler is registered for.
	CodeUnknownCommand = 501
)

// keptAnswers is how many answered commands a Device remembers, to answer
// a duplicate delivery again without running the handler. The service
// keeps at most 100 commands waiting per device, so a duplicate is always
// far more recent than that.
const keptAnswers = 1000

// Command is a command from the service (topic cmd).
type Command struct {
	// ID is the command's cmd_id: the same for every delivery of one
	// command, so the SDK runs a handler once per ID.
	ID     int64
	Name   string
	Params json.RawMessage // null when the command had none
	// Timeout is how long the service waits for the answer, counted from
	// the delivery; each Progress report starts it again. The SDK does
	// not enforce it: an answer after it is dropped by the service. It
	// also bounds how long the SDK tries to send the answer across
	// reconnects (at least a minute).
	Timeout time.Duration
	// ExpireTime is when the command's ttl ends (Unix seconds).
	ExpireTime int64

	d *Device
	// where the answer goes (an MQTT 5 Response Topic, or cmd/reply) and
	// the Correlation Data to send with it.
	replyTopic string
	corr       []byte
}

// Answer is a handler's answer to a command.
type Answer struct {
	// Code 0 means the command succeeded (state succeeded); any other
	// code means it failed (state failed).
	Code int
	// Result is any value encoding/json can encode (a json.RawMessage
	// goes as it is), at most MaxResult bytes encoded; nil sends none.
	Result  any
	Message string
}

// CommandHandler carries out a command and returns its answer. Its ctx
// ends when the backend cancels the command (topic cmd/cancel; the answer
// is then not sent) or the Device is closed. Handlers run each on its own
// goroutine, so a long one (a firmware update) holds up no other command
// or message.
type CommandHandler func(ctx context.Context, cmd *Command) Answer

// OnCommand registers h for commands named name, replacing any handler
// registered before. Register every handler before Connect: commands kept
// for the device arrive as soon as it has subscribed, and one whose name
// has no handler is answered CodeUnknownCommand.
func (c *Config) OnCommand(name string, h CommandHandler) {
	if c.commands == nil {
		c.commands = make(map[string]CommandHandler)
	}
	c.commands[name] = h
}

// Progress reports how far the command has got (percent, 0 to 100) with
// optional details (any value encoding/json can encode, at most
// MaxProgressDetails bytes encoded; nil sends none). The service publishes
// it to the backend as a command.progress event and starts the command's
// timeout again. It returns once the service has acknowledged the report;
// an error wrapping ErrNotAcknowledged means it may not have it.
func (c *Command) Progress(ctx context.Context, percent int, details any) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("device: command progress %d: want 0 to 100", percent)
	}
	p := struct {
		ID       string          `json:"cmd_id"`
		Progress int             `json:"progress"`
		Details  json.RawMessage `json:"details,omitempty"`
	}{ID: strconv.FormatInt(c.ID, 10), Progress: percent}
	if details != nil {
		b, err := json.Marshal(details)
		if err != nil {
			return fmt.Errorf("device: command progress details: %w", err)
		}
		if len(b) > MaxProgressDetails {
			return fmt.Errorf("device: command progress details of %d bytes: at most %d", len(b), MaxProgressDetails)
		}
		p.Details = b
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("device: encode command progress: %w", err)
	}
	return c.d.publishAcked(ctx, "cmd/progress", b, 1)
}

// commands is a Device's record of the commands it has been given: the
// running ones (to cancel them, and to ignore a duplicate delivery) and
// the last keptAnswers answered ones (to answer a duplicate again).
type commands struct {
	mu      sync.Mutex
	running map[int64]context.CancelFunc
	answers map[int64]*answered
	order   []int64 // answered ids, oldest first, for eviction
}

// answered is the stored answer of a command; reply is nil for a
// cancelled command, which is not answered.
type answered struct {
	topic string
	reply []byte
	corr  []byte
}

// cmdPayload is the JSON of topic cmd.
type cmdPayload struct {
	ID         string          `json:"cmd_id"`
	Name       string          `json:"name"`
	Params     json.RawMessage `json:"params"`
	Timeout    int64           `json:"timeout"`
	ExpireTime int64           `json:"expire_time"`
}

// inbound is a PUBLISH from the service, whichever MQTT version carried
// it: a Response Topic and Correlation Data come only with MQTT 5.
type inbound struct {
	topic      string
	payload    []byte
	respTopic  string
	corr       []byte
	ack        func()
	properties bool // carried MQTT 5 properties (the reply may use them)
}

// onCommand handles topic cmd. It must not block: it runs on the
// client's receiving goroutine.
func (d *Device) onCommand(m inbound) {
	var p cmdPayload
	err := json.Unmarshal(m.payload, &p)
	id, perr := strconv.ParseInt(p.ID, 10, 64)
	if err != nil || perr != nil {
		m.ack() // not ours to understand; redelivering will not help
		return
	}
	cmd := &Command{
		ID: id, Name: p.Name, Params: p.Params,
		Timeout: time.Duration(p.Timeout) * time.Second, ExpireTime: p.ExpireTime,
		d: d, replyTopic: d.prefix + "cmd/reply",
	}
	if m.respTopic != "" {
		cmd.replyTopic, cmd.corr = m.respTopic, m.corr
	}
	d.cmds.mu.Lock()
	if _, ok := d.cmds.running[id]; ok {
		// Sent again (after a reconnect) while the handler still runs:
		// its answer goes when it returns.
		d.cmds.mu.Unlock()
		m.ack()
		return
	}
	if a, ok := d.cmds.answers[id]; ok {
		d.cmds.mu.Unlock()
		m.ack()
		if a.reply != nil {
			go d.sendAnswer(a, 0) // the first one may have been lost
		}
		return
	}
	ctx, cancel := context.WithCancel(d.ctx)
	d.cmds.running[id] = cancel
	d.cmds.mu.Unlock()
	// Acknowledged at once: the PUBACK tells the service the device has
	// the command (state delivered), and its timeout starts then.
	m.ack()
	go d.runCommand(ctx, cancel, cmd)
}

// onCancel handles topic cmd/cancel: the running handler's ctx ends and
// its answer will not be sent.
func (d *Device) onCancel(payload []byte) {
	var p struct {
		ID string `json:"cmd_id"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return
	}
	id, err := strconv.ParseInt(p.ID, 10, 64)
	if err != nil {
		return
	}
	d.cmds.mu.Lock()
	cancel, ok := d.cmds.running[id]
	if ok {
		delete(d.cmds.running, id)
		d.cmds.keep(id, &answered{}) // a late delivery must not run it again
	}
	d.cmds.mu.Unlock()
	if ok {
		cancel()
	}
}

// runCommand runs the command's handler and sends its answer, unless
// the command was cancelled meanwhile.
func (d *Device) runCommand(ctx context.Context, cancel context.CancelFunc, cmd *Command) {
	defer cancel()
	ans := d.callHandler(ctx, cmd)
	if d.ctx.Err() != nil {
		return // closed: the answer cannot go, and the service sends the command again
	}
	a := &answered{topic: cmd.replyTopic, corr: cmd.corr, reply: encodeAnswer(cmd.ID, ans)}
	d.cmds.mu.Lock()
	_, still := d.cmds.running[cmd.ID]
	if still {
		delete(d.cmds.running, cmd.ID)
		d.cmds.keep(cmd.ID, a)
	}
	d.cmds.mu.Unlock()
	if still {
		d.sendAnswer(a, cmd.Timeout)
	}
}

// callHandler runs the handler registered for the command's name; a
// panic becomes a CodeHandlerFailed answer.
func (d *Device) callHandler(ctx context.Context, cmd *Command) (ans Answer) {
	h, ok := d.cfg.commands[cmd.Name]
	if !ok {
		return Answer{Code: CodeUnknownCommand, Message: "unknown command " + strconv.Quote(cmd.Name)}
	}
	defer func() {
		if r := recover(); r != nil {
			ans = Answer{Code: CodeHandlerFailed, Message: fmt.Sprintf("handler panicked: %v", r)}
		}
	}()
	return h(ctx, cmd)
}

// encodeAnswer is the JSON of topic cmd/reply.
func encodeAnswer(id int64, ans Answer) []byte {
	p := struct {
		ID      string          `json:"cmd_id"`
		Code    int             `json:"code"`
		Result  json.RawMessage `json:"result,omitempty"`
		Message string          `json:"message,omitempty"`
	}{ID: strconv.FormatInt(id, 10), Code: ans.Code, Message: ans.Message}
	if ans.Result != nil {
		b, err := json.Marshal(ans.Result)
		switch {
		case err != nil:
			p.Code, p.Message = CodeHandlerFailed, "result not encodable: "+err.Error()
		case len(b) > MaxResult:
			p.Code, p.Message = CodeHandlerFailed, fmt.Sprintf("result of %d bytes: at most %d", len(b), MaxResult)
		default:
			p.Result = b
		}
	}
	b, _ := json.Marshal(p) // only strings, numbers and valid JSON
	return b
}

// Answer answers command id outside its handler, on cmd/reply: for a
// device that restarts to carry out a command (a reboot, a firmware
// update that ends in one) and answers once it is back. Such a device
// keeps the id of the command it restarted for; the Device after the
// restart cannot know it. The answer is also kept like a handler's, so a
// delivery of the same command that arrives after it is answered with it
// rather than run. It returns once the service has stored the answer;
// the first answer to a command wins, a later one is dropped.
func (d *Device) Answer(ctx context.Context, id int64, ans Answer) error {
	a := &answered{topic: d.prefix + "cmd/reply", reply: encodeAnswer(id, ans)}
	d.cmds.mu.Lock()
	d.cmds.keep(id, a)
	d.cmds.mu.Unlock()
	return d.publishAcked(ctx, "cmd/reply", a.reply, 1)
}

// sendAnswer publishes an answer at QoS 1 until the service acknowledges
// it (the PUBACK means it is stored), for up to within: the service does
// not send a command again once the device has acknowledged it, so an
// answer lost with a connection would leave the command to time out.
// The service keeps the first answer and drops a repeat.
func (d *Device) sendAnswer(a *answered, within time.Duration) {
	ctx, cancel := context.WithTimeout(d.ctx, max(within, time.Minute))
	defer cancel()
	for {
		// paho.mqtt.golang keeps a QoS 1 publish across a reconnect and
		// sends it again; paho.golang fails it, and it is sent again here.
		pctx, pcancel := context.WithTimeout(ctx, 15*time.Second)
		err := d.conn.publish(pctx, a.topic, 1, a.reply, a.corr)
		pcancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// keep stores a command's answer, forgetting the oldest beyond
// keptAnswers. d.cmds.mu is held.
func (c *commands) keep(id int64, a *answered) {
	c.answers[id] = a
	c.order = append(c.order, id)
	if len(c.order) > keptAnswers {
		delete(c.answers, c.order[0])
		c.order = c.order[1:]
	}
}
