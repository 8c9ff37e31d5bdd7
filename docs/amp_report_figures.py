#!/usr/bin/env python3
"""Cuts the pictures of docs/AMP.md section 9 out of an AMP report page (amp/report_html.c).

  amp_report_figures.py PAGE OUTDIR          the MNIST CNN's pictures (amp_report_*.png)
  amp_report_figures.py PAGE OUTDIR gpt      the GPT demo's (amp_report_gpt_*.png)

Each picture is a page of its own holding some of the report's parts (same
style), rendered by headless Chromium at 1200 pixels wide, its empty bottom
cut off and its colours reduced with Pillow (python3-pil) so the PNG stays small.
"""
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from PIL import Image, ImageChops

NS = "http://www.w3.org/1999/xhtml"
ET.register_namespace("", NS)
ET.register_namespace("svg", "http://www.w3.org/2000/svg")


def by_id(root, ident):
    for e in root.iter():
        if e.get("id") == ident:
            return e
    sys.exit("amp_report_figures: the page has no id '%s'" % ident)


def first_charts(section, heading_text, count):
    """The section's h3 that starts with heading_text, and the first `count` figures of the charts after it."""
    children = list(section)
    for i, e in enumerate(children):
        if e.tag == "{%s}h3" % NS and "".join(e.itertext()).startswith(heading_text):
            charts = copy.deepcopy(children[i + 1])
            for figure in list(charts)[count:]:
                charts.remove(figure)
            return [copy.deepcopy(e), charts]
    sys.exit("amp_report_figures: no heading '%s'" % heading_text)


def render(root, parts, png, width=1200):
    page = copy.deepcopy(root)
    body = page.find("{%s}body" % NS)
    for child in list(body):
        body.remove(child)
    for part in parts:
        body.append(part)
    with tempfile.TemporaryDirectory() as tmp:
        html = os.path.join(tmp, "part.xhtml")  # parsed as XML, so the inline SVG keeps its namespace
        with open(html, "wb") as f:
            f.write(ET.tostring(page, encoding="utf-8"))
        raw = os.path.join(tmp, "raw.png")
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--screenshot=" + raw, "--window-size=%d,3000" % width, "file://" + html],
                       check=True, capture_output=True, timeout=240)
        image = Image.open(raw).convert("RGB")
    box = ImageChops.difference(image, Image.new("RGB", image.size, (255, 255, 255))).getbbox()
    image = image.crop((0, 0, image.width, min(image.height, box[3] + 12)))
    image.quantize(colors=256).save(png, optimize=True)  # 256: fewer would lose the rare reds
    print("amp_report_figures: wrote %s (%dx%d)" % (png, image.width, image.height))


def gpt_pictures(root, out):
    """The top of the page and the first activation-gradient histograms at the start."""
    h1 = root.find("{%s}body/{%s}h1" % (NS, NS))
    render(root, [copy.deepcopy(h1), copy.deepcopy(by_id(root, "summary")), copy.deepcopy(by_id(root, "verdict")),
                  copy.deepcopy(by_id(root, "trajectory"))], os.path.join(out, "amp_report_gpt_top.png"))
    section = by_id(root, "histograms-start")
    render(root, [copy.deepcopy(section.find("{%s}h2" % NS))] + first_charts(section, "Activation gradients", 6),
           os.path.join(out, "amp_report_gpt_act_grads_start.png"))


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] != "gpt"):
        sys.exit(__doc__)
    root = ET.parse(sys.argv[1]).getroot()
    out = sys.argv[2]
    if len(sys.argv) == 4:
        gpt_pictures(root, out)
        return
    h1 = root.find("{%s}body/{%s}h1" % (NS, NS))
    render(root, [copy.deepcopy(h1), copy.deepcopy(by_id(root, "summary")), copy.deepcopy(by_id(root, "verdict")),
                  copy.deepcopy(by_id(root, "trajectory"))], os.path.join(out, "amp_report_top.png"))
    for moment in ("start", "end"):
        section = by_id(root, "histograms-" + moment)
        title = copy.deepcopy(section.find("{%s}h2" % NS))
        render(root, [title] + first_charts(section, "Activation gradients", 6),
               os.path.join(out, "amp_report_act_grads_%s.png" % moment))
    end = by_id(root, "histograms-end")
    table = [copy.deepcopy(end.find("{%s}h2" % NS)), copy.deepcopy(end.find("{%s}table" % NS))]
    render(root, table, os.path.join(out, "amp_report_table_end.png"))
    render(root, [copy.deepcopy(by_id(root, "ops"))], os.path.join(out, "amp_report_ops.png"))


if __name__ == "__main__":
    main()
