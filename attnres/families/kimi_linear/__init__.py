"""kimi_linear"""
