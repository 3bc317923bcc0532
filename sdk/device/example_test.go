package device_test

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"time"

	"github.com/devmsg/devmsg/sdk/device"
)

// A sensor that publishes a reading every ten seconds and reports an
// alert event when it runs hot. Each call returns once the service has
// stored the event; one that was not acknowledged is sent again.
func ExampleDevice_PublishUp() {
	ctx := context.Background()
	d, err := device.Connect(ctx, device.Config{
		Broker: "tcp://localhost:1883", AppKey: "APP_KEY",
		DeviceName: "sensor-0001", DeviceSecret: "DEVICE_SECRET",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	for range time.Tick(10 * time.Second) {
		temp := readTemperature()
		payload, _ := json.Marshal(map[string]float64{"temp": temp})
		for {
			// A deadline bounds the wait for the PUBACK.
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := d.PublishUp(pctx, "telemetry", payload, 1) // topic d/APP_KEY/sensor-0001/up/telemetry
			cancel()
			if !errors.Is(err, device.ErrNotAcknowledged) {
				break // stored, or refused as invalid before sending
			}
		}
		if temp > 80 {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := d.ReportEvent(pctx, "overheat", "temperature above 80 °C", device.Alert); err != nil {
				log.Print(err)
			}
			cancel()
		}
	}
}

func readTemperature() float64 { return 21.5 }

// A device that takes two commands: "ping" answers its params back, and
// "ota" downloads and installs firmware, reporting progress on the way.
// Handlers are registered before Connect; each command runs its handler
// once, even when the service sends it again after a reconnect, and a
// cancelled command ends the handler's context.
func ExampleConfig_OnCommand() {
	cfg := device.Config{
		Broker: "tcp://localhost:1883", AppKey: "APP_KEY",
		DeviceName: "sensor-0001", DeviceSecret: "DEVICE_SECRET",
	}
	cfg.OnCommand("ping", func(_ context.Context, cmd *device.Command) device.Answer {
		return device.Answer{Result: cmd.Params} // code 0: succeeded
	})
	cfg.OnCommand("ota", func(ctx context.Context, cmd *device.Command) device.Answer {
		var p struct{ URL, Version string }
		if err := json.Unmarshal(cmd.Params, &p); err != nil || p.URL == "" {
			return device.Answer{Code: 400, Message: "params want url and version"}
		}
		for pct := 0; pct <= 100; pct += 25 {
			if err := installStep(ctx, p.URL, pct); err != nil {
				return device.Answer{Code: 1, Message: err.Error()} // failed
			}
			// Each report restarts the command's timeout on the service.
			_ = cmd.Progress(ctx, pct, map[string]string{"version": p.Version})
		}
		return device.Answer{Result: map[string]string{"version": p.Version}}
	})
	d, err := device.Connect(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	select {} // commands are answered until the process ends
}

func installStep(ctx context.Context, url string, pct int) error { return ctx.Err() }
