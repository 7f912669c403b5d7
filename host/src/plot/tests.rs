use super::*;

/// Decodes a PNG with the `png` crate (which checks every chunk CRC and the zlib stream); returns
/// (width, height, RGB bytes).
fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let mut reader = ::png::Decoder::new(std::io::Cursor::new(bytes)).read_info().expect("PNG header");
    let mut rgb = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut rgb).expect("PNG data");
    assert_eq!((info.color_type, info.bit_depth), (::png::ColorType::Rgb, ::png::BitDepth::Eight));
    rgb.truncate(info.buffer_size());
    (info.width, info.height, rgb)
}

fn hex(c: plotters::style::RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

fn hit_rate_chart() -> Chart {
    let caps = [250.0, 500.0, 1000.0, 2000.0, 4000.0, 8000.0, 16000.0, 32000.0, 64000.0];
    let curve = |k: f64, floor: f64| -> Vec<(f64, f64)> {
        caps.iter().map(|&c| (c, floor + (88.0 - floor) * (1.0 - (-c / k).exp()))).collect()
    };
    Chart {
        title: "Prefix-cache hit rate vs per-pod capacity (8 pods, Zipf 1.1)".into(),
        x_label: "capacity per pod (KV blocks, log scale)".into(),
        y_label: "hit rate (%)".into(),
        series: vec![
            Series::new("prefix-aware", curve(1500.0, 5.0)),
            Series::new("load-aware", curve(6000.0, 2.0)),
            Series::new("round-robin", curve(12000.0, 1.0)),
        ],
        x_log: true,
        y_min: Some(0.0),
        y_max: Some(100.0),
        annotations: vec![(3000.0, 5.0 + 83.0 * (1.0 - (-2.0f64).exp()), "hot set = 1 pod".into())],
        ..Chart::default()
    }
}

fn alpha_chart() -> Chart {
    let pts =
        |f: &dyn Fn(f64) -> f64| -> Vec<(f64, f64)> { (0..=10).map(|i| i as f64 / 10.0).map(|a| (a, f(a))).collect() };
    let mut with_gap = pts(&|a| 0.9 + 2.5 * (a - 0.45).powi(2) * 4.0);
    with_gap[6].1 = f64::NAN;
    Chart {
        title: "p90 TTFT vs alpha".into(),
        x_label: "alpha (load weight)".into(),
        y_label: "p90 TTFT (s)".into(),
        series: vec![
            Series::new("prefix+load", pts(&|a| 0.8 + 9.0 * (a - 0.4).powi(2))),
            Series::new("with a gap", with_gap),
        ],
        annotations: vec![(0.4, 0.8, "sweet spot".into())],
        ..Chart::default()
    }
}

fn bar_chart() -> Chart {
    let load = |v: [f64; 8]| v.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect::<Vec<_>>();
    Chart {
        title: "Requests per pod".into(),
        x_label: "pod".into(),
        y_label: "requests (thousands)".into(),
        series: vec![
            Series::new("alpha=0.0", load([9.5, 1.2, 0.8, 4.4, 0.5, 0.7, 1.9, 1.0])),
            Series::new("alpha=0.4", load([3.1, 2.6, 2.2, 2.9, 2.4, 2.5, 2.8, 2.6])),
            Series::new("alpha=1.0", load([2.5, 2.5, 2.6, 2.5, 2.5, 2.4, 2.5, 2.5])),
        ],
        bars: true,
        ..Chart::default()
    }
}

#[test]
fn png_is_valid_and_has_the_requested_size() {
    for (chart, w, h) in [(hit_rate_chart(), 900, 540), (bar_chart(), 640, 400), (alpha_chart(), 320, 200)] {
        let bytes = png(&chart, w, h);
        let (pw, ph, rgb) = decode(&bytes);
        assert_eq!((pw, ph), (w, h));
        // Not blank: some pixels carry the first series colour's hue, most are white.
        let white = rgb.chunks(3).filter(|p| p == &[255, 255, 255]).count();
        assert!(white > (w * h) as usize / 2, "mostly background");
        assert!(white < (w * h) as usize, "something drawn");
        let c = style::PALETTE[0];
        assert!(rgb.chunks(3).any(|p| p == [c.0, c.1, c.2]), "series colour present");
    }
}

#[test]
fn svg_is_well_formed_enough() {
    let chart = hit_rate_chart();
    let s = svg(&chart, 900, 540);
    assert!(s.starts_with("<svg ") && s.contains("xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(s.contains("viewBox=\"0 0 900 540\""));
    assert!(s.trim_end().ends_with("</svg>"));
    // One font family in every text, with a generic fallback.
    assert!(s.matches("<text").count() > 10);
    assert_eq!(s.matches("<text").count(), s.matches("font-family=\"DejaVu Sans, sans-serif\"").count());
    for text in
        ["hit rate (%)", "capacity per pod (KV blocks, log scale)", "prefix-aware", "1k", "10k", "hot set = 1 pod"]
    {
        assert!(s.contains(&format!("\n{text}\n</text>")), "{text}");
    }
    // Every series colour draws at least one polyline.
    for i in 0..3 {
        let col = hex(style::series_style(i).color);
        assert!(s.lines().any(|l| l.starts_with("<polyline") && l.contains(&format!("stroke=\"{col}\""))), "{col}");
    }
    assert_eq!(s.matches('<').count(), s.matches('>').count(), "angle brackets balance");
    assert_eq!(s.matches("<text").count(), s.matches("</text>").count());
    assert!(!s.contains("NaN") && !s.contains("inf"));
    // Labels are escaped.
    let tricky = Chart { title: "a < b & \"c\"".into(), ..hit_rate_chart() };
    assert!(svg(&tricky, 600, 400).contains("a &lt; b &amp; &quot;c&quot;"));
}

#[test]
fn the_embedded_font_is_used_for_png_text() {
    // With the font registered, a title changes pixels; without a usable font plotters would fail.
    let plain = Chart { title: String::new(), ..hit_rate_chart() };
    let (_, _, a) = decode(&png(&plain, 600, 400));
    let (_, _, b) = decode(&png(&hit_rate_chart(), 600, 400));
    assert_ne!(a, b);
    // Anti-aliased glyphs: grey levels between ink and white appear.
    assert!(b.chunks(3).any(|p| p[0] == p[1] && p[1] == p[2] && p[0] > 0x40 && p[0] < 0xC0));
}

#[test]
fn output_is_deterministic() {
    for chart in [hit_rate_chart(), alpha_chart(), bar_chart()] {
        assert_eq!(png(&chart, 700, 420), png(&chart, 700, 420));
        assert_eq!(svg(&chart, 700, 420), svg(&chart, 700, 420));
    }
}

#[test]
fn edge_cases_do_not_panic() {
    let long = "x".repeat(500);
    let cases = vec![
        Chart::default(),
        Chart { series: vec![Series::new("empty", vec![])], ..Chart::default() },
        Chart { series: vec![Series::new("one", vec![(3.0, 4.0)])], ..Chart::default() },
        Chart { series: vec![Series::new("one", vec![(3.0, 4.0)])], x_log: true, ..Chart::default() },
        Chart { series: vec![Series::new("flat", vec![(0.0, 5.0), (1.0, 5.0), (2.0, 5.0)])], ..Chart::default() },
        Chart { series: vec![Series::new("zero", vec![(0.0, 0.0), (1.0, 0.0)])], bars: true, ..Chart::default() },
        Chart {
            series: vec![Series::new(
                "bad",
                vec![
                    (f64::NAN, 1.0),
                    (1.0, f64::INFINITY),
                    (-1.0, 2.0),
                    (0.0, 3.0),
                    (2.0, f64::NEG_INFINITY),
                    (5.0, 1.0),
                ],
            )],
            x_log: true,
            annotations: vec![(f64::NAN, 1.0, "nan".into()), (-5.0, 1.0, "neg".into()), (5.0, f64::NAN, "top".into())],
            ..Chart::default()
        },
        Chart {
            title: long.clone(),
            x_label: long.clone(),
            y_label: long.clone(),
            series: (0..20).map(|i| Series::new(format!("{i}{long}"), vec![(i as f64, i as f64 * 1e9)])).collect(),
            ..Chart::default()
        },
        Chart {
            series: vec![Series::new("out of range", vec![(0.0, -50.0), (1.0, 50.0), (2.0, 500.0), (3.0, 20.0)])],
            y_min: Some(0.0),
            y_max: Some(100.0),
            ..Chart::default()
        },
        Chart {
            series: vec![Series::new("tiny", vec![(1e-9, 1e-12), (2e-9, 3e-12)])],
            y_min: Some(5.0),
            ..Chart::default()
        },
        Chart { series: vec![Series::new("huge", vec![(-1e300, 1e300), (1e300, -1e300)])], ..Chart::default() },
        Chart {
            series: vec![Series::new("bars", vec![(0.5, 1.0), (f64::NAN, 2.0), (7.0, -3.0)])],
            bars: true,
            ..Chart::default()
        },
        Chart { y_min: Some(10.0), y_max: Some(1.0), ..alpha_chart() },
    ];
    for chart in &cases {
        for (w, h) in [(800, 480), (1, 1), (200, 2000), (100_000, 20)] {
            let p = png(chart, w, h);
            let (pw, ph, _) = decode(&p);
            assert!(pw >= 16 && ph >= 16);
            let s = svg(chart, w, h);
            assert!(s.starts_with("<svg") && !s.contains("NaN"), "{s}");
        }
    }
    // Long labels are truncated to fit.
    let s = svg(&cases[7], 800, 480);
    assert!(!s.contains(&"x".repeat(120)));
    assert!(s.contains("..."));
    assert!(!s.contains(&long));
}

#[test]
fn gaps_split_lines_and_every_point_has_a_marker() {
    let mut chart = alpha_chart();
    chart.series.truncate(1);
    chart.series[0].points[4].1 = f64::NAN;
    chart.annotations.clear();
    let s = svg(&chart, 800, 480);
    let col = format!("stroke=\"{}\" stroke-width=\"2\"", hex(style::series_style(0).color));
    let lines = s.lines().filter(|l| l.starts_with("<polyline") && l.contains(&col)).count();
    // Two runs around the gap, plus the legend's stretch of line.
    assert_eq!(lines, 3);
    // A marker (a filled polygon, then its outline) at each of the 10 finite points, and one in the legend.
    let fill = format!("fill=\"{}\"", hex(style::series_style(0).color));
    assert_eq!(s.lines().filter(|l| l.starts_with("<polygon") && l.contains(&fill)).count(), 11);
}

/// Writes sample charts to `target/plot-samples/` for eyeballing.
#[test]
fn write_samples() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plot-samples");
    std::fs::create_dir_all(&dir).unwrap();
    let mut many = hit_rate_chart();
    many.title = "Nine series cycle the palette and markers".into();
    many.x_log = false;
    many.y_min = None;
    many.y_max = None;
    many.annotations.clear();
    many.series = (0..9)
        .map(|i| {
            Series::new(
                format!("series {i}"),
                (0..12).map(|k| (k as f64 * 250.0, (k * (i + 1)) as f64 * 0.01)).collect(),
            )
        })
        .collect();
    for (name, chart, w, h) in [
        ("hit-rate", hit_rate_chart(), 900, 520),
        ("alpha", alpha_chart(), 800, 480),
        ("bars", bar_chart(), 800, 440),
        ("many", many, 900, 520),
        ("small", hit_rate_chart(), 480, 300),
        (
            "edge",
            Chart {
                title: "Edge cases: a flat series, a single point, gaps and an infinity".into(),
                x_label: "x".into(),
                y_label: "y".into(),
                series: vec![
                    Series::new("flat", vec![(1.0, 5.0), (2.0, 5.0), (3.0, 5.0)]),
                    Series::new("single point", vec![(2.5, 5.5)]),
                    Series::new(
                        "gaps",
                        vec![(1.0, 4.6), (1.5, f64::NAN), (2.0, 4.7), (2.5, f64::INFINITY), (3.0, 4.8)],
                    ),
                    Series::new("", vec![]),
                ],
                ..Chart::default()
            },
            640,
            400,
        ),
        ("empty", Chart::default(), 400, 250),
    ] {
        std::fs::write(dir.join(format!("{name}.png")), png(&chart, w, h)).unwrap();
        std::fs::write(dir.join(format!("{name}.svg")), svg(&chart, w, h)).unwrap();
    }
}

/// Bars can print their values: a bar of 0.36 beside one of 94.9 stays readable.
#[test]
fn bar_values_are_printed_when_asked() {
    let chart = Chart {
        series: vec![Series::new("p90", vec![(0.0, 0.3621), (1.0, 94.9)])],
        bars: true,
        x_categories: vec!["PA".into(), "RR".into()],
        ..Chart::default()
    };
    // plotters writes a text element's content on a line of its own
    assert!(!svg(&chart, 600, 400).contains("\n0.362\n</text>"));
    let s = svg(&Chart { bar_values: true, ..chart }, 600, 400);
    assert!(s.contains("\n0.362\n</text>") && s.contains("\n94.9\n</text>"), "{s}");
}
