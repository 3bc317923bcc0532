package main

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	sdk "github.com/devmsg/devmsg/sdk/device"
)

// simDevice is one device of `devmsg sim`: connected until ctx ends, but
// offline for rebootTime when a reboot command asks.
type simDevice struct {
	cfg                    sdk.Config
	say                    func(string, ...any)
	reportEvery, telemetry time.Duration
	rebootTime, otaTime    time.Duration
	failOTA                bool // answer ota with a failure

	reboot   chan int64 // the id of a reboot command, from its handler
	mu       sync.Mutex
	rebooted map[int64]bool // commands it rebooted for, as a real device keeps them in flash
}

// run connects the device (telling connected how the first attempt went)
// and keeps it connected until ctx ends, going offline for a reboot.
func (s *simDevice) run(ctx context.Context, connected chan<- error) {
	name := s.cfg.DeviceName
	s.reboot = make(chan int64, 1)
	s.rebooted = make(map[int64]bool)
	cfg := s.cfg
	cfg.OnMessage = func(m sdk.Message) { s.say("%s message %d: %s", name, m.ID, m.Body) }
	cfg.OnDesired = func(doc sdk.Desired) {
		b, _ := json.Marshal(doc.Properties)
		s.say("%s desired version %d: %s", name, doc.Version, b)
	}
	cfg.OnConnectionLost = func(err error) { s.say("%s connection lost, reconnecting: %v", name, err) }
	for cmd, h := range map[string]sdk.CommandHandler{"ping": s.ping, "fail": s.fail, "reboot": s.rebootCmd, "ota": s.ota} {
		cfg.OnCommand(cmd, s.logged(h))
	}
	var answer int64 // the reboot command to answer once back
	for first := true; ; first = false {
		d, err := sdk.Connect(ctx, cfg)
		if first {
			connected <- err
		}
		switch {
		case err != nil && (first || ctx.Err() != nil):
			return
		case err != nil: // back from a reboot, but the service is not there
			s.say("%s connect after reboot: %v", name, err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		if answer != 0 {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := d.Answer(actx, answer, sdk.Answer{Result: map[string]bool{"rebooted": true}})
			cancel()
			s.say("%s command %d reboot: back, answered (%v)", name, answer, err)
			answer = 0
		}
		id, rebooting := s.live(ctx, d)
		d.Close()
		if !rebooting {
			return
		}
		s.say("%s rebooting for command %d", name, id)
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.rebootTime):
		}
		answer = id
	}
}

// live reports and publishes as asked until ctx ends (false) or a reboot
// command comes (true, with its id).
func (s *simDevice) live(ctx context.Context, d *sdk.Device) (int64, bool) {
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if s.telemetry > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			publishReadings(lctx, d, s.cfg.DeviceName, s.telemetry, s.say)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		simulate(lctx, d, s.cfg.DeviceName, s.reportEvery, s.say)
	}()
	select {
	case <-ctx.Done():
		return 0, false
	case id := <-s.reboot:
		return id, true
	}
}

// logged prints each command and its answer.
func (s *simDevice) logged(h sdk.CommandHandler) sdk.CommandHandler {
	return func(ctx context.Context, cmd *sdk.Command) sdk.Answer {
		s.say("%s command %d %s: %s", s.cfg.DeviceName, cmd.ID, cmd.Name, cmd.Params)
		a := h(ctx, cmd)
		if ctx.Err() == nil {
			s.say("%s command %d %s: answered code %d", s.cfg.DeviceName, cmd.ID, cmd.Name, a.Code)
		}
		return a
	}
}

func (s *simDevice) ping(_ context.Context, cmd *sdk.Command) sdk.Answer {
	return sdk.Answer{Result: cmd.Params}
}

func (s *simDevice) fail(context.Context, *sdk.Command) sdk.Answer {
	return sdk.Answer{Code: 1, Message: "failed as asked"}
}

// rebootCmd takes the device offline; it is answered once the device is
// back (run). Sent again after that, it is answered at once.
func (s *simDevice) rebootCmd(ctx context.Context, cmd *sdk.Command) sdk.Answer {
	s.mu.Lock()
	done := s.rebooted[cmd.ID]
	s.rebooted[cmd.ID] = true
	s.mu.Unlock()
	if done {
		return sdk.Answer{Result: map[string]bool{"rebooted": true}}
	}
	select {
	case s.reboot <- cmd.ID:
	default:
		return sdk.Answer{Code: 1, Message: "already rebooting"}
	}
	<-ctx.Done() // the Device closes for the reboot: nothing is sent
	return sdk.Answer{}
}

// ota reports progress 0, 20, ... 100 over otaTime, then answers with the
// version asked for; a failing device fails at 60 %.
func (s *simDevice) ota(ctx context.Context, cmd *sdk.Command) sdk.Answer {
	var p struct {
		Version string `json:"version"`
	}
	_ = json.Unmarshal(cmd.Params, &p) // any params will do
	const steps = 5
	t := time.NewTicker(s.otaTime / steps)
	defer t.Stop()
	for pct := 0; ; pct += 100 / steps {
		if s.failOTA && pct >= 60 {
			return sdk.Answer{Code: 1, Message: "ota failed at 60% (simulated)"}
		}
		if err := cmd.Progress(ctx, pct, nil); err != nil && ctx.Err() == nil {
			s.say("%s command %d ota progress: %v", s.cfg.DeviceName, cmd.ID, err)
		}
		if pct == 100 {
			return sdk.Answer{Result: map[string]string{"version": p.Version}}
		}
		select {
		case <-ctx.Done():
			return sdk.Answer{Code: 1, Message: "cancelled"}
		case <-t.C:
		}
	}
}
