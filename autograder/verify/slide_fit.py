"""Do the lecture decks fit a projector? python -m autograder.verify.slide_fit [DECK ...]   (`make slides-check`)

Opens every deck `make slides` wrote (build/slides/*.slides.html, or the decks named) in a headless
Chromium whose window is a 1280x720 projector, walks every slide with reveal.js's own navigation
(`Reveal.slide(h, v)`) once its plots, fonts and math have loaded, and measures it against the frame
reveal.js is configured with (`Reveal.getConfig()`: width and height), which reveal.js scales to the
window. A slide fails when its content is taller or wider than the frame (the projector cuts it off),
when a box on it cuts its content off at the side (a code line longer than the input box), when any
of it is drawn smaller than MIN_SCALE (too small to read from the back of the room), or when its text
shows nbgrader's solution markers. Exit status 0 only if every slide of every deck passes;
2 where Chromium or its driver is missing.

The browser tests (tests/pipeline/test_browser.py) measure two decks with the same functions.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from autograder.paths import BUILD

SLIDES = BUILD / "slides"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PROJECTOR = (1280, 720)
#: Content drawn smaller than this (the template shrinking a slide to fit, a cell's "scale" or a code
#: cell scaled for its long lines) is too small to read from the back of the room: split it instead.
MIN_SCALE = 0.7
MARKERS = ("BEGIN SOLUTION", "END SOLUTION")
PAGE_TIMEOUT = 120

# Every slide of the deck, shown one after another once the deck, its images, fonts and math are ready:
# its place (h, v), its content's size in the frame's units, the smallest scale any of it is drawn at
# (the template's shrinking of the slide times a cell's zoom), whether a box cuts text off at its right
# edge (a code line longer than its input box), and its text.
MEASURE_JS = """
const done = arguments[arguments.length - 1];
const ready = () => window.Reveal && Reveal.isReady() && window.MathJax && MathJax.Hub
  && Array.from(document.images).every(img => img.complete);
// Whether a box that hides what overflows it (a code cell's input) has text reaching past its right edge.
const cutsText = box => {
  if (getComputedStyle(box).overflowX === 'visible') return false;
  const edge = box.getBoundingClientRect().right + 1;
  const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    range.selectNodeContents(node);
    if (node.textContent.trim() && range.getBoundingClientRect().right > edge) return true;
  }
  return false;
};
const settle = () => new Promise(resolve => MathJax.Hub.Queue(
  () => document.fonts.ready.then(() => requestAnimationFrame(() => requestAnimationFrame(resolve)))));
async function measure() {
  const frame = {width: Reveal.getConfig().width, height: Reveal.getConfig().height};
  const slides = [];
  for (const slide of Reveal.getSlides()) {
    const where = Reveal.getIndices(slide);
    Reveal.slide(where.h, where.v || 0);
    await settle();
    // How much smaller the slide is drawn than laid out (the template's shrinking), from what the page shows.
    const fit = Math.min(1, Math.round(100 * slide.getBoundingClientRect().height / Reveal.getScale()
                                       / (slide.offsetHeight || 1)) / 100);
    const inner = Array.from(slide.querySelectorAll('*'));
    const zoom = Math.min(1, ...inner.map(e => parseFloat(getComputedStyle(e).zoom) || 1));
    const clipped = inner.some(cutsText);
    slides.push({h: where.h, v: where.v || 0, height: slide.scrollHeight * fit, width: slide.scrollWidth * fit,
                 scale: fit * zoom, clipped: clipped, text: slide.innerText});
  }
  return {frame: frame, slides: slides};
}
(function wait(tries) {
  if (ready()) { measure().then(done, err => done({error: String(err)})); }
  else if (tries > 0) { setTimeout(() => wait(tries - 1), 250); }
  else { done({error: 'reveal.js, MathJax or the images never finished loading'}); }
})(400);
"""


@dataclass(frozen=True)
class Slide:
    """One slide as the projector shows it: sizes in the frame's units (the configured width and height)."""

    deck: str
    h: int
    v: int
    height: float
    width: float
    scale: float
    clipped: bool
    text: str

    @property
    def where(self) -> str:
        """The slide as reveal.js' address bar names it (#/h/v) and a reader finds it: its first line."""
        first = next((line.strip() for line in self.text.splitlines() if line.strip()), "")
        return f"{self.deck} #/{self.h}/{self.v} ({first[:50]})"


@dataclass(frozen=True)
class Deck:
    name: str
    frame_width: int
    frame_height: int
    slides: list[Slide]


def missing_browser() -> str | None:
    """Why no deck can be measured here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"{path} not found: apt-get install chromium chromium-driver"
    return None


@contextlib.contextmanager
def projector(work: Path) -> Iterator[webdriver.Chrome]:
    """A headless Chromium whose page is exactly PROJECTOR pixels, with a fresh profile in `work`."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={work / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        show_as_projector(driver)
        yield driver
    finally:
        driver.quit()


def show_as_projector(driver: webdriver.Chrome) -> None:
    """Make the page PROJECTOR pixels at one device pixel per CSS pixel, whatever the window's size."""
    width, height = PROJECTOR
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    driver.set_page_load_timeout(PAGE_TIMEOUT)
    driver.set_script_timeout(PAGE_TIMEOUT)


def measure_deck(driver: webdriver.Chrome, path: Path) -> Deck:
    """Open the deck at `path` and measure every slide of it."""
    driver.get(path.resolve().as_uri())
    shown = driver.execute_async_script(MEASURE_JS)
    if "error" in shown:
        raise RuntimeError(f"{path.name}: {shown['error']}")
    name = path.name.removesuffix(".slides.html")
    slides = [Slide(name, s["h"], s["v"], s["height"], s["width"], s["scale"], s["clipped"], s["text"])
              for s in shown["slides"]]
    return Deck(name, shown["frame"]["width"], shown["frame"]["height"], slides)


def over_the_frame(deck: Deck) -> list[Slide]:
    """The slides the projector cuts off: taller or wider than the frame (a pixel of rounding allowed)."""
    return [s for s in deck.slides if s.height > deck.frame_height + 1 or s.width > deck.frame_width + 1]


def cut_at_the_side(deck: Deck) -> list[Slide]:
    """The slides with a box that cuts text off at its right edge (a code line longer than its input box)."""
    return [s for s in deck.slides if s.clipped]


def too_small(deck: Deck) -> list[Slide]:
    """The slides with content drawn smaller than MIN_SCALE to fit."""
    return [s for s in deck.slides if s.scale < MIN_SCALE]


def with_markers(deck: Deck) -> list[Slide]:
    """The slides whose text shows nbgrader's solution markers."""
    return [s for s in deck.slides if any(marker in s.text for marker in MARKERS)]


def problems(deck: Deck) -> list[str]:
    """One line per slide that fails, saying why."""
    lines = [f"{s.where}: {s.height / deck.frame_height:.2f} times the frame's height ({s.height:.0f} x "
             f"{s.width:.0f} for {deck.frame_height} x {deck.frame_width})" for s in over_the_frame(deck)]
    lines += [f"{s.where}: text cut off at the side (a line longer than its box)" for s in cut_at_the_side(deck)]
    lines += [f"{s.where}: drawn at {s.scale:.2f} (below {MIN_SCALE}): split it" for s in too_small(deck)]
    lines += [f"{s.where}: shows nbgrader's solution markers" for s in with_markers(deck)]
    return lines


def summary(deck: Deck) -> str:
    return (f"{deck.name}: {len(deck.slides)} slides, {len(over_the_frame(deck))} over the frame, "
            f"{len(cut_at_the_side(deck))} cut at the side, {len(too_small(deck))} drawn below {MIN_SCALE}, "
            f"{len(with_markers(deck))} with solution markers")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("decks", nargs="*", type=Path, help=f"decks to measure (default: {SLIDES}/*.slides.html)")
    args = parser.parse_args(argv)
    if missing_browser():
        print(f"error: {missing_browser()}", file=sys.stderr)
        return 2
    paths = args.decks or sorted(SLIDES.glob("*.slides.html"))
    if not paths:
        print(f"error: no deck in {SLIDES}; run `make slides` first", file=sys.stderr)
        return 2
    failures = []
    with tempfile.TemporaryDirectory(prefix="slide-fit-") as work, projector(Path(work)) as driver:
        for path in paths:
            deck = measure_deck(driver, path)
            print(summary(deck))
            failures += problems(deck)
    for line in failures:
        print(f"  {line}")
    total = "every slide fits, none shows a solution marker" if not failures else f"{len(failures)} problems"
    print(total)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
