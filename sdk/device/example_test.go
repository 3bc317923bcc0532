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
