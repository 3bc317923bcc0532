package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/devmsg/devmsg/apitypes"
)

// A device page has a form that sends the device a command (POST
// /cmd/v1/cmd with wait) and lists the device's recent commands with
// their states, each read with GET /cmd/v1/cmd. The API lists no
// commands, so the list is made of the commands of the device's recent
// command.progress and command.done events (looked back for in the event
// log as recentCommandPulls pulls allow) and of those this session sent
// it: a command from the backend shows once it reports progress or ends.
// While one of them has not ended, the list refreshes itself every second
// (data-live), so an answer shows as it arrives.
const (
	// recentCommands is the most commands the list shows, newest first.
	recentCommands = 20
	// recentCommandPulls bounds the pulls of the event log per page; each
	// counts against the app's query rate limit.
	recentCommandPulls = 4
	// commandLookBack is the first span of event ids looked back over,
	// each further one 16 times longer.
	commandLookBack = 5000
	// commandWaitMax is the most a command form may wait for the answer:
	// the form's POST holds the browser's request that long.
	commandWaitMax = 60
)

// deviceCommands is the commands part of the device page.
type deviceCommands struct {
	Recent []apitypes.Command // newest first
	Open   bool               // one of them has not ended
	Note   string             // why the list may be incomplete
}

// openState reports whether a command in state s has not ended.
func openState(s string) bool {
	return s == "queued" || s == "sent" || s == "delivered" || s == "in_progress"
}

// rememberCommand notes that the session sent the app's device command
// id, for the device page's list.
func (c *Console) rememberCommand(sessionID, app, device string, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sessions[sessionID]
	if !ok {
		return
	}
	if s.commands == nil {
		s.commands = map[string][]int64{}
	}
	k := app + "/" + device
	ids := append([]int64{id}, s.commands[k]...)
	s.commands[k] = ids[:min(len(ids), recentCommands)]
}

// sentCommands returns the ids of the commands the session sent the
// app's device, newest first.
func (c *Console) sentCommands(sessionID, app, device string) []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sessions[sessionID]; ok {
		return slices.Clone(s.commands[app+"/"+device])
	}
	return nil
}

// deviceCommands reads the device's recent commands. A read the API
// refuses leaves a note rather than failing the page.
func (c *Console) deviceCommands(q *req, device string) (deviceCommands, error) {
	var d deviceCommands
	ids := c.sentCommands(q.s.id, q.key, device)
	logged, err := c.loggedCommands(q, device)
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			return d, err
		}
		d.Note = "The device's command events could not be read: " + ae.Message
	}
	ids = append(ids, logged...)
	slices.SortFunc(ids, func(a, b int64) int { return int(min(max(b-a, -1), 1)) })
	ids = slices.Compact(ids)
	for _, id := range ids[:min(len(ids), recentCommands)] {
		var cmd apitypes.Command
		err := q.appAPI(http.MethodGet, "/cmd/v1/cmd", url.Values{"cmd_id": {strconv.FormatInt(id, 10)}}, nil, &cmd)
		var ae *apiError
		switch {
		case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
			continue
		case errors.As(err, &ae): // over the rate limit, say: the rest of the page still shows
			d.Note = "Not every command could be read: " + ae.Message
			return d, nil
		case err != nil:
			return d, err
		}
		d.Recent = append(d.Recent, cmd)
		d.Open = d.Open || openState(cmd.State)
	}
	return d, nil
}

// loggedCommands returns the ids of the commands in the device's recent
// command.progress and command.done events: it pulls from a span of ids
// before the newest event, a longer one each round, until it has
// recentCommands of them, has read from the oldest kept event, or has
// made recentCommandPulls pulls.
func (c *Console) loggedCommands(q *req, device string) ([]int64, error) {
	newest, err := c.newestEvent(q)
	if err != nil || newest == 0 {
		return nil, err
	}
	f := eventFilter{Types: []string{"command.progress", "command.done"}, Device: device}
	pulls := 1 // newestEvent's
	var ids []int64
	for span := int64(commandLookBack); pulls < recentCommandPulls; span *= 16 {
		after := max(newest-span, 0)
		ids = ids[:0]
		for cursor := after; pulls < recentCommandPulls; {
			page, err := f.pull(q, cursor, 1000, 0)
			pulls++
			if err != nil {
				return nil, err
			}
			for _, e := range page.Events {
				var data struct {
					CmdID string `json:"cmd_id"`
				}
				if json.Unmarshal(e.Data, &data) == nil {
					if id, err := strconv.ParseInt(data.CmdID, 10, 64); err == nil {
						ids = append(ids, id)
					}
				}
			}
			next := page.next(cursor)
			if next >= newest || next == cursor {
				break
			}
			cursor = next
		}
		if len(slices.Compact(slices.Sorted(slices.Values(ids)))) >= recentCommands || after == 0 {
			break
		}
	}
	return ids, nil
}

// sendCommand sends the device the form's command and waits for its
// answer as long as the form says; the device page then shows it.
func (c *Console) sendCommand(q *req) (string, error) {
	device := q.r.PathValue("name")
	back := q.devicePath()
	form := q.r.PostForm
	body := apitypes.CommandRequest{SeqNo: seqNo(), DeviceName: device, Name: strings.TrimSpace(form.Get("name"))}
	if body.Name == "" {
		return back, userErrorf("Enter the command's name.")
	}
	if p := strings.TrimSpace(form.Get("params")); p != "" {
		if !json.Valid([]byte(p)) {
			return back, userErrorf("Params must be JSON (a string in double quotes, a number, an object...), or empty for none.")
		}
		body.Params = json.RawMessage(p)
	}
	for _, f := range []struct {
		name    string
		into    **int64
		lo, hi  int64
		meaning string
	}{
		{"ttl", &body.TTL, 0, 604800, "how long the command may wait for the device to be online"},
		{"timeout", &body.Timeout, 1, 3600, "how long the device has to answer"},
		{"wait", &body.Wait, 0, commandWaitMax, "how long this page waits for the answer"},
	} {
		v := strings.TrimSpace(form.Get(f.name))
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < f.lo || n > f.hi {
			return back, userErrorf("%s must be a whole number of seconds from %d to %d (%s), not %q.", f.name, f.lo, f.hi, f.meaning, v)
		}
		*f.into = &n
	}
	var out apitypes.Command
	if err := q.appAPI(http.MethodPost, "/cmd/v1/cmd", nil, body, &out); err != nil {
		return back, err
	}
	c.rememberCommand(q.s.id, q.key, device, out.CmdID)
	msg := fmt.Sprintf("Command %d (%s): %s.", out.CmdID, out.Name, out.State)
	if openState(out.State) {
		msg += " Its answer shows below when it comes."
	}
	c.setFlash(q.s.id, &flash{Kind: "ok", Message: msg})
	return back + "#commands-h", nil
}
