#!/usr/bin/env python3
"""Checks an AMP report page (amp/report_html.c) as a reader's tools see it.

  check_report.py html PAGE            well-formed (XML parser: the page is XHTML; html5lib, strict: valid HTML),
                                       the expected sections, nothing fetched, no script, and every number the
                                       verdict quotes shown elsewhere on the page
  check_report.py chromium PAGE PNG    rendered by headless Chromium: no console message, no failed load, the
                                       sections in the DOM it built, and a screenshot PNG of the page's width

Exit 0: passed; 1: failed (the reasons on stderr); 77: a tool is missing (the test skips).
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

XHTML = "{http://www.w3.org/1999/xhtml}"
SECTIONS = ["summary", "verdict", "trajectory", "guide", "histograms-start", "histograms-end", "ops"]


def fail(message):
    print("check_report: " + message, file=sys.stderr)
    sys.exit(1)


def text_of(element):
    return "".join(element.itertext())


def check_html(page):
    try:
        root = ET.parse(page).getroot()
    except ET.ParseError as e:
        fail("%s is not well-formed XHTML: %s" % (page, e))
    try:
        import html5lib
    except ImportError:
        print("check_report: html5lib is not installed (apt-get install python3-html5lib)", file=sys.stderr)
        sys.exit(77)
    with open(page, "rb") as f:
        try:
            html5lib.HTMLParser(strict=True).parse(f)
        except html5lib.html5parser.ParseError as e:
            fail("%s is not valid HTML: %s" % (page, e))
    ids = {e.get("id"): e for e in root.iter() if e.get("id")}
    for section in SECTIONS:
        if section not in ids:
            fail("no element with id '%s'" % section)
    for e in root.iter():
        tag = e.tag.split("}")[-1]
        if tag in ("script", "iframe", "object", "embed", "link", "img"):
            fail("the page holds a <%s>: it must need nothing but itself" % tag)
        for attribute in ("src", "href"):
            value = e.get(attribute)
            if value is not None and not value.startswith("#"):
                fail("<%s %s='%s'> points outside the page" % (tag, attribute, value))
    for section in ("trajectory", "histograms-start", "histograms-end"):
        if not list(ids[section].iter("{http://www.w3.org/2000/svg}svg")):
            fail("section '%s' draws no SVG" % section)
    # Every number a verdict sentence quotes (a share, a power of two, a step count) is on the page outside the verdict.
    rest = " ".join(text_of(ids[s]) for s in SECTIONS if s != "verdict")
    rest += " " + " ".join(e.get("id") or "" for e in root.iter())
    sentences = list(ids["verdict"].iter(XHTML + "li"))
    if len(sentences) < 3:
        fail("the verdict has %d sentences, expected at least 3" % len(sentences))
    for li in sentences:
        sentence = text_of(li)
        numbers = re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?%|2\^-?\d+|step \d+", sentence)
        if not numbers and "nothing to judge" not in sentence:
            fail("the verdict sentence '%s' quotes no number" % sentence)
        for number in numbers:
            if number not in rest:
                fail("the verdict quotes %s, which the page shows nowhere else: '%s'" % (number, sentence))


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s is not a PNG" % path)
    return struct.unpack(">II", head[16:24])


def check_chromium(page, png):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("check_report: chromium is not installed (apt-get install chromium)", file=sys.stderr)
        sys.exit(77)
    url = "file://" + os.path.abspath(page)
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]
    shot = subprocess.run(common + ["--screenshot=" + png, "--window-size=1200,2400", url],
                          capture_output=True, text=True, timeout=240)
    dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True, timeout=240)
    for run in (shot, dom):
        if run.returncode != 0:
            fail("chromium exited with %d: %s" % (run.returncode, run.stderr[-2000:]))
        for line in run.stderr.splitlines():
            if ":CONSOLE" in line or "net::ERR" in line or "Uncaught" in line:
                fail("chromium reported: " + line)
    for section in SECTIONS:
        if 'id="%s"' % section not in dom.stdout:
            fail("the DOM chromium built has no id '%s'" % section)
    if dom.stdout.count("<svg") < 10:
        fail("the DOM chromium built holds %d SVG charts, expected at least 10" % dom.stdout.count("<svg"))
    if not os.path.exists(png):
        fail("chromium wrote no screenshot: " + shot.stderr[-2000:])
    width, height = png_size(png)
    if (width, height) != (1200, 2400):
        fail("the screenshot is %dx%d, expected 1200x2400" % (width, height))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "html":
        check_html(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "chromium":
        check_chromium(sys.argv[2], sys.argv[3])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
